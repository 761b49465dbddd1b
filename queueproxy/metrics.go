package queueproxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
)

// metrics are the queue-proxy's Prometheus series. Counters per status
// code are resolved once and cached, so the request path takes no lock.
type metrics struct {
	requests *prometheus.CounterVec
	byCode   *httpmetrics.CodeCounters
	duration prometheus.Histogram
}

// newMetrics registers the series with reg, labelled with the function.
// inFlight and queued are read when Prometheus scrapes; limit is the
// concurrency limit, exported so that a dashboard shows in-flight
// requests against it.
func newMetrics(reg prometheus.Registerer, namespace, function string, limit int, inFlight, queued func() float64) (*metrics, error) {
	labels := prometheus.Labels{"namespace": namespace, "function": function}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sless_queueproxy_requests_total",
			Help:        "Requests answered by the queue-proxy, by status code.",
			ConstLabels: labels,
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "sless_queueproxy_request_duration_seconds",
			Help:        "Time from a request's arrival at the queue-proxy to its answer, queue wait included.",
			ConstLabels: labels,
			Buckets:     httpmetrics.DurationBuckets,
		}),
	}
	collectors := []prometheus.Collector{
		m.requests, m.duration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sless_queueproxy_inflight_requests",
			Help:        "Requests at the user process now.",
			ConstLabels: labels,
		}, inFlight),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sless_queueproxy_queued_requests",
			Help:        "Requests waiting for a concurrency slot now.",
			ConstLabels: labels,
		}, queued),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sless_queueproxy_concurrency_limit",
			Help:        "Requests the instance takes at once (the function's concurrency; 0 is unlimited).",
			ConstLabels: labels,
		}, func() float64 { return float64(limit) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.byCode = httpmetrics.NewCodeCounters(m.requests)
	return m, nil
}

func (m *metrics) observe(code int, d time.Duration) {
	m.duration.Observe(d.Seconds())
	m.count(code)
}

// count adds one answer with code, for requests the proxy never timed
// (refused while being read).
func (m *metrics) count(code int) {
	m.byCode.Inc(code)
}
