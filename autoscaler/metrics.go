package autoscaler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
)

// metrics are the autoscaler's series per function: what it asked for,
// what there was and what was ready, its ceiling, and whether it was
// panicking, at the last decision; its starts from zero that requests
// waited for, counted here, where every activator's requests meet, so a
// start counts once however many activators held requests for it; and
// its ticks, whose stop means no function is scaled any more.
type metrics struct {
	desired, actual, ready, max, panic *prometheus.GaugeVec
	noData, coldStarts                 *prometheus.CounterVec
	coldDuration                       *prometheus.HistogramVec
	queueDepth                         *prometheus.GaugeVec
	steps                              prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "function"}
	m := &metrics{
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_desired_replicas", Help: "Instances the autoscaler last asked for.",
		}, labels),
		actual: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_actual_replicas",
			Help: "Instances the function had at the last decision, starting or ready: its Deployment's pods on Kubernetes, its processes in sless dev.",
		}, labels),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_ready_replicas", Help: "Instances ready at the last decision.",
		}, labels),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_max_replicas", Help: "The function's scale.max, the most instances the autoscaler asks for.",
		}, labels),
		panic: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_panic_mode", Help: "1 while the function is in panic mode.",
		}, labels),
		noData: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_autoscaler_no_data_total",
			Help: "Decisions not made because no load was observed for a whole stable window (every scrape failed): the function kept its scale.",
		}, labels),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_cold_starts_total",
			Help: "Starts from zero instances that invocations waited for: one per start, however many waited, at however many activators.",
		}, labels),
		coldDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sless_cold_start_duration_seconds",
			Help:    "Per cold start, the time from the first invocation waiting at zero (its activator's poke) to the first instance ready.",
			Buckets: httpmetrics.StartBuckets,
		}, labels),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_queue_depth", Help: "Ready messages in a queue the function consumes, at the last good read.",
		}, []string{"namespace", "function", "queue"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_autoscaler_steps_total",
			Help: "Seconds of work done: each observes every function and, every DecideEvery, decides.",
		}),
	}
	for _, c := range []prometheus.Collector{m.desired, m.actual, m.ready, m.max, m.panic, m.noData, m.coldStarts, m.coldDuration, m.queueDepth, m.steps} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// series are one function's gauges, looked up once: finding a gauge by
// its label values hashes and validates them, which was half of a tick's
// CPU over 10,000 functions (BenchmarkStep10k).
type series struct {
	desired, actual, ready, max, panic shownGauge
}

// shownGauge is a gauge and the value it shows, which is stored only when
// it changes: each gauge is an object of its own, and storing the same
// value again each second in those of a fleet mostly at rest was a cache
// miss each, a tenth of a tick's CPU at 10,000 functions. Its user
// serializes its sets.
type shownGauge struct {
	g     prometheus.Gauge
	shown float64 // a new gauge shows 0
}

func (s *shownGauge) set(v float64) {
	if v != s.shown {
		s.shown = v
		s.g.Set(v)
	}
}

func (m *metrics) series(namespace, name string) *series {
	return &series{
		desired: shownGauge{g: m.desired.WithLabelValues(namespace, name)},
		actual:  shownGauge{g: m.actual.WithLabelValues(namespace, name)},
		ready:   shownGauge{g: m.ready.WithLabelValues(namespace, name)},
		max:     shownGauge{g: m.max.WithLabelValues(namespace, name)},
		panic:   shownGauge{g: m.panic.WithLabelValues(namespace, name)},
	}
}

// decided shows a decision. Called with its state's mu held.
func (s *series) decided(desired, ready, max int32, panicking bool) {
	s.desired.set(float64(desired))
	s.ready.set(float64(ready))
	s.max.set(float64(max))
	p := 0.0
	if panicking {
		p = 1
	}
	s.panic.set(p)
}

func (m *metrics) forget(namespace, name string) {
	for _, g := range []*prometheus.GaugeVec{m.desired, m.actual, m.ready, m.max, m.panic} {
		g.DeleteLabelValues(namespace, name)
	}
	m.noData.DeleteLabelValues(namespace, name)
	m.coldStarts.DeleteLabelValues(namespace, name)
	m.coldDuration.DeleteLabelValues(namespace, name)
	m.queueDepth.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "function": name})
}

// coldStarted counts a start from zero that requests waited for wait.
func (m *metrics) coldStarted(namespace, name string, wait time.Duration) {
	m.coldStarts.WithLabelValues(namespace, name).Inc()
	m.coldDuration.WithLabelValues(namespace, name).Observe(wait.Seconds())
}
