package activator

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// durationBuckets span a warm request (0.5 ms) to a cold start and the
// longest timeout.
var durationBuckets = []float64{
	.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 3600,
}

// metrics are the activator's series, labelled namespace and function.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	coldStarts   *prometheus.CounterVec
	coldDuration *prometheus.HistogramVec
}

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
			Buckets: durationBuckets,
		}, fn),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_cold_starts_total",
			Help: "Invocations that waited for a function with no instance.",
		}, fn),
		coldDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sless_cold_start_duration_seconds",
			Help:    "How long invocations waited for a function's first instance.",
			Buckets: durationBuckets,
		}, fn),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.coldStarts, m.coldDuration, bufferedCollector{a}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// commonCodes are the status codes whose counters each function caches;
// codeSlot maps a code to its cache slot (0: not cached). The table is
// shared, so an idle function costs a few hundred bytes, not one slot per
// possible code.
var (
	commonCodes = [...]int{200, 201, 202, 204, 206, 301, 302, 304, 307, 308, 400, 401, 403, 404, 405, 408,
		409, 413, 422, 429, 499, 500, 501, 502, 503, 504}
	codeSlot [600]uint8
)

func init() {
	for i, c := range commonCodes {
		codeSlot[c] = uint8(i + 1)
	}
}

// routeMetrics are one function's series, resolved once so that the
// request path takes no lock.
type routeMetrics struct {
	requests     *prometheus.CounterVec
	byCode       [len(commonCodes) + 1]atomic.Pointer[prometheus.Counter]
	duration     prometheus.Observer
	coldStarts   prometheus.Counter
	coldDuration prometheus.Observer
}

func (m *metrics) forFunction(namespace, name string) *routeMetrics {
	labels := prometheus.Labels{"namespace": namespace, "function": name}
	return &routeMetrics{
		requests:     m.requests.MustCurryWith(labels),
		duration:     m.duration.With(labels),
		coldStarts:   m.coldStarts.With(labels),
		coldDuration: m.coldDuration.With(labels),
	}
}

func (r *routeMetrics) observe(code int, d time.Duration, cold bool, wait time.Duration) {
	r.duration.Observe(d.Seconds())
	if cold {
		r.coldStarts.Inc()
		r.coldDuration.Observe(wait.Seconds())
	}
	slot := 0
	if code >= 0 && code < len(codeSlot) {
		slot = int(codeSlot[code])
	}
	if slot == 0 {
		r.requests.WithLabelValues(strconv.Itoa(code)).Inc()
		return
	}
	c := r.byCode[slot].Load()
	if c == nil {
		counter := r.requests.WithLabelValues(strconv.Itoa(code))
		c = &counter
		r.byCode[slot].Store(c)
	}
	(*c).Inc()
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
