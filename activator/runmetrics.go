package activator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
}

// The outcomes of an attempt (sless_run_attempts_total): it ended its
// run succeeded or failed, or queued it again to be retried.
const (
	attemptSucceeded = "succeeded"
	attemptFailed    = "failed"
	attemptRetried   = "retried"
)

func newRunMetrics(reg prometheus.Registerer, r func() *runner) (*runMetrics, error) {
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
	}
	for _, c := range []prometheus.Collector{m.submitted, m.attempts, m.completed, pendingCollector{r}} {
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
// read them, when Prometheus scrapes.
type pendingCollector struct{ r func() *runner }

func (c pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- runningDesc
	ch <- oldestDesc
}

func (c pendingCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r()
	if r == nil {
		return
	}
	r.mu.Lock()
	pending := r.pending
	r.mu.Unlock()
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
