package activator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
)

// metrics are the activator's series, labelled namespace and function.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	coldRequests *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	runs         *runMetrics
}

// Reasons the activator answers an invocation itself, with 503 or 504
// (sless_activator_rejected_requests_total).
const (
	reasonBufferFull  = "buffer_full"
	reasonUnavailable = "unavailable"
	reasonTimeout     = "timeout"
)

func newMetrics(reg prometheus.Registerer, a *Activator) (*metrics, error) {
	fn := []string{"namespace", "function"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_activator_requests_total",
			Help: "Invocations answered by the activator, by status code.",
		}, append(fn, "code")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sless_activator_request_duration_seconds",
			Help:    "Time from an invocation's arrival at the activator to its answer, waiting included.",
			Buckets: httpmetrics.DurationBuckets,
		}, fn),
		coldRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_cold_start_requests_total",
			Help: "Invocations that waited for a function with no instance to start one.",
		}, fn),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_activator_rejected_requests_total",
			Help: "Invocations the activator answered itself, by reason: buffer_full (503, too many waiting), unavailable (503, the function cannot start) or timeout (504, no instance within the timeout).",
		}, append(fn, "reason")),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.coldRequests, m.rejected, bufferedCollector{a}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	m.runs, err = newRunMetrics(reg, a)
	return m, err
}

// routeMetrics are one function's series, resolved once so that the
// request path takes no lock.
type routeMetrics struct {
	requests     *httpmetrics.CodeCounters
	duration     prometheus.Observer
	coldRequests prometheus.Counter
	// rejected is curried with the function; its series are made on the
	// first rejection, off the fast path, so a function that never
	// refuses carries none.
	rejected *prometheus.CounterVec
}

func (m *metrics) forFunction(namespace, name string) *routeMetrics {
	labels := prometheus.Labels{"namespace": namespace, "function": name}
	return &routeMetrics{
		requests:     httpmetrics.NewCodeCounters(m.requests.MustCurryWith(labels)),
		duration:     m.duration.With(labels),
		coldRequests: m.coldRequests.With(labels),
		rejected:     m.rejected.MustCurryWith(labels),
	}
}

// reject counts an invocation the activator answered itself.
func (r *routeMetrics) reject(reason string) {
	r.rejected.WithLabelValues(reason).Inc()
}

func (r *routeMetrics) observe(code int, d time.Duration, cold bool) {
	r.duration.Observe(d.Seconds())
	if cold {
		r.coldRequests.Inc()
	}
	r.requests.Inc(code)
}

var bufferedDesc = prometheus.NewDesc("sless_activator_buffered_requests",
	"Invocations waiting in the activator for an instance.", []string{"namespace", "function"}, nil)

// bufferedCollector reports every function's waiting requests when
// Prometheus scrapes, at no cost to the request path.
type bufferedCollector struct{ a *Activator }

func (c bufferedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- bufferedDesc }

func (c bufferedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.a.routes.all() {
		ch <- prometheus.MustNewConstMetric(bufferedDesc, prometheus.GaugeValue,
			float64(rt.throttler.Waiting()), rt.fn.Namespace, rt.fn.Name)
	}
}
