// Package httpmetrics holds what the request-path components share in their
// Prometheus series: the latency buckets, and per-status-code counters
// resolved once so that counting an answer takes no lock.
package httpmetrics

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DurationBuckets span a fast function behind a fast proxy (0.5 ms) to the
// default timeout (300 s). They are fine below a second, where proxies and
// fast functions live, and coarse above it: every bucket is a series per
// function and instance, and the page is scraped every few seconds
// (a function's series, within 60: benchmarks/RESULTS.md, bench-metrics).
var DurationBuckets = []float64{
	.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60, 300,
}

// StartBuckets span a cold start: a Go binary on a warm cache (25 ms) to
// a runtime that loads for seconds; what takes longer is a build or an
// install, counted apart.
var StartBuckets = []float64{.025, .05, .1, .25, .5, 1, 2.5, 10}

// commonCodes are the status codes whose counters are cached; codeSlot maps
// a code to its cache slot (0: not cached). The table is shared, so a set
// of counters costs a few hundred bytes, not one slot per possible code.
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

// CodeCounters counts answers by status code in a CounterVec whose only
// remaining label is "code".
type CodeCounters struct {
	vec   *prometheus.CounterVec
	cache [len(commonCodes) + 1]atomic.Pointer[prometheus.Counter]
}

// NewCodeCounters counts into vec, which must have the one label "code"
// left (curry the others first).
func NewCodeCounters(vec *prometheus.CounterVec) *CodeCounters {
	return &CodeCounters{vec: vec}
}

// Inc counts one answer with code. Common codes take no lock after their
// first use.
func (c *CodeCounters) Inc(code int) {
	slot := 0
	if code >= 0 && code < len(codeSlot) {
		slot = int(codeSlot[code])
	}
	if slot == 0 {
		c.vec.WithLabelValues(strconv.Itoa(code)).Inc()
		return
	}
	counter := c.cache[slot].Load()
	if counter == nil {
		cv := c.vec.WithLabelValues(strconv.Itoa(code))
		counter = &cv
		c.cache[slot].Store(counter)
	}
	(*counter).Inc()
}
