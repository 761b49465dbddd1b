// Package timeline keeps the last minutes of each function's life in a
// fixed amount of memory, for the console: invocations as they end (rate,
// errors, latency, cold starts) and the platform's gauges (instances
// desired and ready, requests buffered, queue depth) sampled every step.
// It answers from memory, so a console needs no Prometheus.
package timeline

import (
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/httpmetrics"
	"sless.dev/sless/invocation"
)

// Step is the width of a slot; Span how far back a timeline reaches.
const (
	Step  = 5 * time.Second
	Span  = 15 * time.Minute
	slots = int(Span / Step)
)

// buckets are the latency bounds, in seconds: those of the platform's
// duration histograms, so the console and Prometheus agree.
var buckets = httpmetrics.DurationBuckets

// counts is a slot's latency histogram: one count per bucket and one past
// the last (TestBuckets holds it to the buckets' length).
type counts [16]uint32

// Gauges are what the platform reports of a function at a sample.
type Gauges struct {
	Desired, Ready, Buffered int
	QueueDepth               int64
}

// Timeline holds every known function's slots. Add is on the request
// path's record sink: it takes a read lock and the function's own lock.
type Timeline struct {
	mu  sync.RWMutex
	fns map[types.NamespacedName]*function
}

// function is one function's steps. Its slots are made at the first step
// with something other than zeros in it (a request, a gauge above zero)
// and dropped once the Span holds nothing else: a function at zero and
// idle, most of them where there are thousands, holds no slots, only the
// run of steps it was sampled at, all zeros, so that a series shows zeros
// there and not gaps.
type function struct {
	mu    sync.Mutex
	slots *[slots]slot
	// zeroFrom to zeroTo are the steps sampled all zeros while slots is
	// nil; zeroFrom 0 when none were.
	zeroFrom, zeroTo int64
	// active is the last step with something other than zeros.
	active int64
}

// slot is one Step of a function's life.
type slot struct {
	at                           int64 // the step's index since the epoch; 0 unused
	requests, errors, coldStarts uint32
	latency                      counts
	sampled                      bool
	desired, ready, buffered     int32
	queueDepth                   int64
}

// New returns an empty timeline.
func New() *Timeline { return &Timeline{fns: map[types.NamespacedName]*function{}} }

func stepOf(t time.Time) int64 { return t.UnixNano() / int64(Step) }

// at returns f's slot for step i, reset when it held an older step; nil
// when i is older than the slot's, so late records never wipe newer ones.
// It makes f's slots when f has none.
func (f *function) at(i int64) *slot {
	if f.slots == nil {
		f.grow(i)
	}
	s := &f.slots[i%int64(slots)]
	switch {
	case s.at == i:
	case s.at > i:
		return nil
	default:
		*s = slot{at: i}
	}
	return s
}

// grow makes f's slots, holding the steps it was sampled at all zeros
// within the Span ending at step i.
func (f *function) grow(i int64) {
	f.slots = new([slots]slot)
	for j := max(f.zeroFrom, i-int64(slots)+1); f.zeroFrom > 0 && j <= f.zeroTo; j++ {
		f.slots[j%int64(slots)] = slot{at: j, sampled: true}
	}
	f.zeroFrom, f.zeroTo = 0, 0
}

// shrink drops f's slots once the Span ending at step i holds nothing
// but zeros, keeping the steps sampled just before i as a run of zeros.
func (f *function) shrink(i int64) {
	if f.slots == nil || f.active > i-int64(slots) {
		return
	}
	from := int64(0)
	for j := i - 1; j > i-int64(slots); j-- {
		if s := &f.slots[j%int64(slots)]; s.at != j || !s.sampled {
			break
		}
		from = j
	}
	f.slots, f.zeroFrom, f.zeroTo = nil, from, max(from, i-1)
	if from == 0 {
		f.zeroTo = 0
	}
}

// sampledZero notes that step i was sampled all zeros, and says whether
// that is kept without slots (f has none). A step apart from the run
// kept starts a new one when newer, and is left out when older.
func (f *function) sampledZero(i int64) bool {
	if f.slots != nil {
		return false
	}
	switch {
	case f.zeroFrom == 0 || i > f.zeroTo+1:
		f.zeroFrom, f.zeroTo = i, i
	case i >= f.zeroFrom-1:
		f.zeroFrom, f.zeroTo = min(f.zeroFrom, i), max(f.zeroTo, i)
	}
	return true
}

// view is step i as f keeps it, empty when it keeps nothing of it.
func (f *function) view(i int64) slot {
	if f.slots == nil {
		if f.zeroFrom > 0 && i >= f.zeroFrom && i <= f.zeroTo {
			return slot{at: i, sampled: true}
		}
		return slot{}
	}
	if s := f.slots[i%int64(slots)]; s.at == i {
		return s
	}
	return slot{}
}

// Add counts a record in the step it ended in; records of functions the
// timeline does not know (never tracked or sampled, or removed) are left
// out, so memory follows the functions that exist.
func (t *Timeline) Add(r invocation.Record) {
	t.mu.RLock()
	f := t.fns[types.NamespacedName{Namespace: r.Namespace, Name: r.Function}]
	t.mu.RUnlock()
	if f == nil {
		return
	}
	b := bucketOf(r.Duration)
	i := stepOf(r.Start.Add(r.Duration))
	f.mu.Lock()
	f.active = max(f.active, i)
	if s := f.at(i); s != nil {
		s.requests++
		if r.Status >= 500 {
			s.errors++
		}
		if r.ColdStart {
			s.coldStarts++
		}
		s.latency[b]++
	}
	f.mu.Unlock()
}

// bucketOf is the index of the first bucket bound d fits under.
func bucketOf(d time.Duration) int {
	sec := d.Seconds()
	for i, ub := range buckets {
		if sec <= ub {
			return i
		}
	}
	return len(buckets)
}

// Track adds a function, so that its records count from now on, before
// its first sample.
func (t *Timeline) Track(namespace, name string) {
	t.track(types.NamespacedName{Namespace: namespace, Name: name})
}

func (t *Timeline) track(k types.NamespacedName) *function {
	t.mu.RLock()
	f := t.fns[k]
	t.mu.RUnlock()
	if f == nil {
		t.mu.Lock()
		if f = t.fns[k]; f == nil {
			f = &function{}
			t.fns[k] = f
		}
		t.mu.Unlock()
	}
	return f
}

// Sample records a function's gauges at now, adding the function when
// new. Buffered keeps the step's peak, the others its last value.
func (t *Timeline) Sample(now time.Time, namespace, name string, g Gauges) {
	f := t.track(types.NamespacedName{Namespace: namespace, Name: name})
	i := stepOf(now)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shrink(i)
	if g == (Gauges{}) && f.sampledZero(i) {
		return
	}
	if g != (Gauges{}) {
		f.active = max(f.active, i)
	}
	if s := f.at(i); s != nil {
		buffered := s.buffered
		if !s.sampled {
			buffered = 0
		}
		s.sampled = true
		s.desired, s.ready, s.queueDepth = int32(g.Desired), int32(g.Ready), g.QueueDepth
		s.buffered = max(buffered, int32(g.Buffered))
	}
}

// Retain forgets every function keep says no to.
func (t *Timeline) Retain(keep func(namespace, name string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.fns {
		if !keep(k.Namespace, k.Name) {
			delete(t.fns, k)
		}
	}
}

// Remove forgets a function.
func (t *Timeline) Remove(namespace, name string) {
	t.mu.Lock()
	delete(t.fns, types.NamespacedName{Namespace: namespace, Name: name})
	t.mu.Unlock()
}

// Stats are a function's invocations over a window.
type Stats struct {
	Requests   int `json:"requests"`
	Errors     int `json:"errors"`
	ColdStarts int `json:"coldStarts"`
	// RequestsPerSecond is Requests over the whole window.
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	// ErrorRate is the share of requests the platform or the function
	// failed (5xx): a client's fault (4xx) is not the function's.
	ErrorRate float64 `json:"errorRate"`
	// P99Ms is the 99th percentile latency, estimated within the
	// duration buckets; nil without requests.
	P99Ms *float64 `json:"p99Ms"`
}

// Stats sums a function's steps over the window ending at now; ok is false
// when the timeline does not know it.
func (t *Timeline) Stats(now time.Time, namespace, name string, window time.Duration) (st Stats, ok bool) {
	f := t.get(namespace, name)
	if f == nil {
		return Stats{}, false
	}
	last := stepOf(now)
	first := last - int64(min(window, Span)/Step) + 1
	var latency counts
	f.mu.Lock()
	for i := first; i <= last; i++ {
		s := f.view(i)
		if s.requests == 0 {
			continue
		}
		st.Requests += int(s.requests)
		st.Errors += int(s.errors)
		st.ColdStarts += int(s.coldStarts)
		for b, n := range s.latency {
			latency[b] += n
		}
	}
	f.mu.Unlock()
	st.RequestsPerSecond = float64(st.Requests) / window.Seconds()
	if st.Requests > 0 {
		st.ErrorRate = float64(st.Errors) / float64(st.Requests)
		st.P99Ms = ms(quantile(.99, latency[:]))
	}
	return st, true
}

func (t *Timeline) get(namespace, name string) *function {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.fns[types.NamespacedName{Namespace: namespace, Name: name}]
}

// quantile estimates the q-quantile of counts by bucket, in seconds, as
// Prometheus's histogram_quantile does: linear within the bucket it falls
// in, the highest bound for the last bucket.
func quantile(q float64, counts []uint32) float64 {
	var total uint64
	for _, n := range counts {
		total += uint64(n)
	}
	rank := q * float64(total)
	var seen float64
	for i, n := range counts {
		if seen+float64(n) < rank || n == 0 {
			seen += float64(n)
			continue
		}
		if i == len(buckets) {
			return buckets[len(buckets)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = buckets[i-1]
		}
		return lower + (buckets[i]-lower)*(rank-seen)/float64(n)
	}
	return buckets[len(buckets)-1]
}

// Series are a function's steps over the whole Span, oldest first, as
// columns: Time[i] is the start of step i in Unix seconds. A step with no
// requests has nil percentiles; one never sampled, nil gauges.
type Series struct {
	StepSeconds       float64    `json:"stepSeconds"`
	Time              []int64    `json:"time"`
	RequestsPerSecond []float64  `json:"requestsPerSecond"`
	ErrorsPerSecond   []float64  `json:"errorsPerSecond"`
	ColdStarts        []int      `json:"coldStarts"`
	P50Ms             []*float64 `json:"p50Ms"`
	P90Ms             []*float64 `json:"p90Ms"`
	P99Ms             []*float64 `json:"p99Ms"`
	Desired           []*int     `json:"desired"`
	Ready             []*int     `json:"ready"`
	Buffered          []*int     `json:"buffered"`
	QueueDepth        []*int64   `json:"queueDepth"`
}

// Series reports a function's last Span up to now; ok is false when the
// timeline does not know it.
func (t *Timeline) Series(now time.Time, namespace, name string) (Series, bool) {
	f := t.get(namespace, name)
	if f == nil {
		return Series{}, false
	}
	last := stepOf(now)
	s := newSeries()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := last - int64(slots) + 1; i <= last; i++ {
		sl := f.view(i)
		s.add(i, &sl)
	}
	return s, true
}

func newSeries() Series {
	return Series{StepSeconds: Step.Seconds(), Time: make([]int64, 0, slots),
		RequestsPerSecond: make([]float64, 0, slots), ErrorsPerSecond: make([]float64, 0, slots),
		ColdStarts: make([]int, 0, slots), P50Ms: make([]*float64, 0, slots), P90Ms: make([]*float64, 0, slots),
		P99Ms: make([]*float64, 0, slots), Desired: make([]*int, 0, slots), Ready: make([]*int, 0, slots),
		Buffered: make([]*int, 0, slots), QueueDepth: make([]*int64, 0, slots)}
}

// add appends step i, whose slot is sl (or an older step's, then empty).
func (s *Series) add(i int64, sl *slot) {
	if sl.at != i {
		sl = &slot{}
	}
	s.Time = append(s.Time, i*int64(Step/time.Second))
	s.RequestsPerSecond = append(s.RequestsPerSecond, float64(sl.requests)/Step.Seconds())
	s.ErrorsPerSecond = append(s.ErrorsPerSecond, float64(sl.errors)/Step.Seconds())
	s.ColdStarts = append(s.ColdStarts, int(sl.coldStarts))
	var p50, p90, p99 *float64
	if sl.requests > 0 {
		p50, p90, p99 = ms(quantile(.5, sl.latency[:])), ms(quantile(.9, sl.latency[:])), ms(quantile(.99, sl.latency[:]))
	}
	s.P50Ms, s.P90Ms, s.P99Ms = append(s.P50Ms, p50), append(s.P90Ms, p90), append(s.P99Ms, p99)
	var desired, ready, buffered *int
	var depth *int64
	if sl.sampled {
		d, r, b, q := int(sl.desired), int(sl.ready), int(sl.buffered), sl.queueDepth
		desired, ready, buffered, depth = &d, &r, &b, &q
	}
	s.Desired, s.Ready = append(s.Desired, desired), append(s.Ready, ready)
	s.Buffered, s.QueueDepth = append(s.Buffered, buffered), append(s.QueueDepth, depth)
}

// ms turns seconds into milliseconds, rounded to the microsecond.
func ms(sec float64) *float64 {
	v := math.Round(sec*1e6) / 1e3
	return &v
}

// Tee sends each record to r, then to t.
func Tee(r invocation.Sink, t *Timeline) invocation.Sink { return tee{r, t} }

type tee struct {
	r invocation.Sink
	t *Timeline
}

func (s tee) Add(rec invocation.Record) {
	s.r.Add(rec)
	s.t.Add(rec)
}
