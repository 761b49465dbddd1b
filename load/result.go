package load

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// Latencies are recorded in microseconds, from 1 µs to an hour, to three
// significant digits (0.1%).
const (
	lowest  = 1
	highest = int64(time.Hour / time.Microsecond)
	digits  = 3
)

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(lowest, highest, digits) }

// sample is one request's outcome.
type sample struct {
	at      time.Duration // when it ended, from the run's start
	latency time.Duration
	code    int    // 0: no answer
	err     string // why, when no answer
}

// errorKind names a transport error for the count of errors by kind: a
// reset (the peer aborted the connection), a close (it ended the
// connection before the answer was whole), a timeout, a refused dial.
func errorKind(err error) string {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), os.IsTimeout(err):
		return "timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no free connection"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, fasthttp.ErrConnectionClosed),
		errors.Is(err, syscall.EPIPE):
		return "connection closed"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "name not found"
	}
	return "other: " + err.Error()
}

// Result is what a run measured.
type Result struct {
	// Requests counts the answers, whatever their status; Errors the
	// requests that got none (TransportErrors by kind).
	Requests        int64            `json:"requests"`
	Errors          int64            `json:"errors"`
	Codes           map[int]int64    `json:"codes"`
	TransportErrors map[string]int64 `json:"transportErrors,omitempty"`
	Elapsed         time.Duration    `json:"elapsedNs"`
	// Throughput is answers per second.
	Throughput float64 `json:"throughput"`
	Latency    Latency `json:"latency"`
	// Seconds are the run second by second, by when requests ended: the
	// first MaxSeconds of it, SecondsLeftOut counting those past them
	// (still in the run's totals and histogram).
	Seconds        []Second `json:"seconds"`
	SecondsLeftOut int      `json:"secondsLeftOut,omitempty"`
	// Histogram holds every answer's latency, in microseconds.
	Histogram *hdrhistogram.Snapshot `json:"histogram"`
}

// Latency holds percentiles of the answers' latencies.
type Latency struct {
	P50  time.Duration `json:"p50Ns"`
	P90  time.Duration `json:"p90Ns"`
	P99  time.Duration `json:"p99Ns"`
	P999 time.Duration `json:"p999Ns"`
	Max  time.Duration `json:"maxNs"`
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	at := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Latency{P50: at(50), P90: at(90), P99: at(99), P999: at(99.9),
		Max: time.Duration(h.Max()) * time.Microsecond}
}

// Second is one second of a run.
type Second struct {
	// At is the second's start, from the run's.
	At       time.Duration `json:"atNs"`
	Requests int64         `json:"requests"`
	Errors   int64         `json:"errors"`
	Codes    map[int]int64 `json:"codes"`
	Latency  Latency       `json:"latency"`
}

// MaxSeconds bounds the seconds a run keeps (a day): past it, a run's
// memory stops growing.
const MaxSeconds = 24 * 60 * 60

// aggregator gathers the workers' samples: the whole run's histogram, and
// each second's until no sample can still arrive for it (a request ends
// within the timeout), when it becomes a Second and its histogram goes.
type aggregator struct {
	start time.Time
	grace time.Duration

	mu              sync.Mutex
	total           *hdrhistogram.Histogram
	codes           map[int]int64
	transportErrors map[string]int64
	requests, errs  int64
	open            map[int64]*openSecond
	done            []Second
	lastDone        int64 // the last second closed, -1 before any
	leftOut         int   // seconds closed past MaxSeconds
	free            []*hdrhistogram.Histogram
}

type openSecond struct {
	hist           *hdrhistogram.Histogram
	requests, errs int64
	codes          map[int]int64
}

func newAggregator(start time.Time, timeout time.Duration) *aggregator {
	return &aggregator{start: start, grace: timeout + 2*time.Second, total: newHistogram(),
		codes: map[int]int64{}, transportErrors: map[string]int64{}, open: map[int64]*openSecond{}, lastDone: -1}
}

func (a *aggregator) add(samples []sample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range samples {
		sec := a.second(int64(s.at / time.Second))
		if s.code == 0 {
			a.errs++
			a.transportErrors[s.err]++
			if sec != nil {
				sec.errs++
			}
			continue
		}
		us := min(max(s.latency.Microseconds(), lowest), highest)
		_ = a.total.RecordValue(us)
		a.requests++
		a.codes[s.code]++
		if sec != nil {
			_ = sec.hist.RecordValue(us)
			sec.requests++
			sec.codes[s.code]++
		}
	}
}

// second returns second i's aggregate; nil when it closed already (a
// sample later than the grace: counted in the run, not in its second).
func (a *aggregator) second(i int64) *openSecond {
	if s := a.open[i]; s != nil {
		return s
	}
	if i <= a.lastDone {
		return nil
	}
	h := newHistogram()
	if n := len(a.free); n > 0 {
		h, a.free = a.free[n-1], a.free[:n-1]
	}
	s := &openSecond{hist: h, codes: map[int]int64{}}
	a.open[i] = s
	return s
}

// close turns the open seconds before i into Seconds, in order.
func (a *aggregator) close(i int64) {
	var keys []int64
	for k := range a.open {
		if k < i {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for next := a.lastDone + 1; next < k; next++ { // a second with nothing in it
			a.keep(Second{At: time.Duration(next) * time.Second, Codes: map[int]int64{}})
		}
		s := a.open[k]
		a.keep(Second{At: time.Duration(k) * time.Second, Requests: s.requests, Errors: s.errs,
			Codes: s.codes, Latency: latencyOf(s.hist)})
		s.hist.Reset()
		a.free = append(a.free, s.hist)
		delete(a.open, k)
		a.lastDone = k
	}
}

// keep adds a closed second, up to MaxSeconds of them.
func (a *aggregator) keep(s Second) {
	if len(a.done) < MaxSeconds {
		a.done = append(a.done, s)
		return
	}
	a.leftOut++
}

// follow closes the seconds past the grace and reports progress every
// second, until done.
func (a *aggregator) follow(ctx context.Context, done <-chan struct{}, progress func(Progress)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		elapsed := time.Since(a.start)
		a.mu.Lock()
		a.close(int64((elapsed - a.grace) / time.Second))
		p := Progress{Elapsed: elapsed, Requests: a.requests, Errors: a.errs,
			P99: time.Duration(a.total.ValueAtQuantile(99)) * time.Microsecond}
		if last := a.open[int64(elapsed/time.Second)-1]; last != nil {
			p.Rate = float64(last.requests)
		}
		a.mu.Unlock()
		if progress != nil {
			progress(p)
		}
	}
}

// result closes every second and sums the run up.
func (a *aggregator) result(elapsed time.Duration) Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.close(int64(elapsed/time.Second) + 1)
	r := Result{Requests: a.requests, Errors: a.errs, Codes: a.codes, Elapsed: elapsed,
		Throughput: float64(a.requests) / elapsed.Seconds(), Latency: latencyOf(a.total),
		Seconds: a.done, SecondsLeftOut: a.leftOut, Histogram: a.total.Export()}
	if len(a.transportErrors) > 0 {
		r.TransportErrors = a.transportErrors
	}
	return r
}
