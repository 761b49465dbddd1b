package activator

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/runs"
)

// runMetrics are the series of the runs an activator takes and attempts.
// The counters are this activator's; the gauges are what it last read of
// the store every activator shares, so that with several activators on
// one database a dashboard takes their max, not their sum.
type runMetrics struct {
	submitted *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	completed *prometheus.CounterVec
	published prometheus.Counter
}

// The outcomes of an attempt (sless_run_attempts_total): it ended its
// run succeeded or failed, or queued it again to be retried.
const (
	attemptSucceeded = "succeeded"
	attemptFailed    = "failed"
	attemptRetried   = "retried"
)

func newRunMetrics(reg prometheus.Registerer, a *Activator) (*runMetrics, error) {
	fn := []string{"namespace", "function"}
	m := &runMetrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_runs_submitted_total",
			Help: "Runs (Prefer: respond-async) accepted and stored by this activator.",
		}, fn),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_run_attempts_total",
			Help: "Attempts of runs made by this activator, by outcome: succeeded or failed (the run ended so), retried (queued again).",
		}, append(fn, "outcome")),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_runs_completed_total",
			Help: "Runs ended by this activator, by final state: succeeded, failed, cancelled (DELETE /runs/{id}) or expired (queued past async.maxAge).",
		}, append(fn, "state")),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_run_answers_published_total",
			Help: "Answers of ended runs published by this activator to the queues of their functions' onSuccess and onFailure, confirmed by the broker.",
		}),
	}
	for _, c := range []prometheus.Collector{m.submitted, m.attempts, m.completed, m.published, pendingCollector{a}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// attempted counts an attempt by its outcome, and the run it ended.
func (m *runMetrics) attempted(namespace, function string, o runs.Outcome) {
	switch o.State {
	case runs.Queued:
		m.attempts.WithLabelValues(namespace, function, attemptRetried).Inc()
		return
	case runs.Succeeded:
		m.attempts.WithLabelValues(namespace, function, attemptSucceeded).Inc()
	default:
		m.attempts.WithLabelValues(namespace, function, attemptFailed).Inc()
	}
	m.ended(namespace, function, o.State, 1)
}

// ended counts runs ended in state s.
func (m *runMetrics) ended(namespace, function string, s runs.State, n int) {
	m.completed.WithLabelValues(namespace, function, string(s)).Add(float64(n))
}

var (
	queuedDesc = prometheus.NewDesc("sless_runs_queued",
		"Runs queued (waiting for an attempt, or for a retry), as this activator last read the run store.", []string{"namespace", "function"}, nil)
	runningDesc = prometheus.NewDesc("sless_runs_running",
		"Runs with an attempt under way, in any activator, as this activator last read the run store.", []string{"namespace", "function"}, nil)
	oldestDesc = prometheus.NewDesc("sless_runs_oldest_queued_age_seconds",
		"Age of the oldest queued run, as this activator last read the run store.", []string{"namespace", "function"}, nil)
)

// pendingCollector reports the runs not ended, as the dispatcher last
// read them, when Prometheus scrapes: of every function served here (none
// is 0) and of any other with runs.
type pendingCollector struct{ a *Activator }

func (c pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- runningDesc
	ch <- oldestDesc
}

func (c pendingCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.a.runs
	if r == nil {
		return
	}
	r.mu.Lock()
	pending := slices.Clone(r.pending) // appended to below
	r.mu.Unlock()
	seen := make(map[types.NamespacedName]bool, len(pending))
	for _, d := range pending {
		seen[types.NamespacedName{Namespace: d.Namespace, Name: d.Function}] = true
	}
	for _, rt := range c.a.routes.all() {
		if !seen[types.NamespacedName{Namespace: rt.fn.Namespace, Name: rt.fn.Name}] {
			pending = append(pending, runs.Demand{Namespace: rt.fn.Namespace, Function: rt.fn.Name})
		}
	}
	now := time.Now()
	for _, d := range pending {
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(d.Queued), d.Namespace, d.Function)
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(d.Running), d.Namespace, d.Function)
		age := 0.0
		if !d.OldestQueued.IsZero() {
			age = now.Sub(d.OldestQueued).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, d.Namespace, d.Function)
	}
}
