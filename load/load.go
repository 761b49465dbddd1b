// Package load is sless's HTTP load generator: a fasthttp client that runs
// either open-loop on a schedule of rates, with latency measured from each
// request's intended send time so that a stalled server cannot hide its
// queueing (no coordinated omission, as wrk2 does), or closed-loop, each
// connection sending as soon as its previous answer arrives. Latencies go
// into HDR histograms, for the whole run and for each second of it, in
// memory that does not grow with the run's length.
package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options describe one run.
type Options struct {
	// URL is the target; on a loopback address unless AllowRemote.
	URL         string
	AllowRemote bool
	// Method defaults to GET; Header and Body are sent with every request.
	Method string
	Header [][2]string
	Body   []byte
	// Rate is an open-loop run's fixed rate per second, for Duration;
	// Steps, a schedule of rates, whose length is the run's. Neither:
	// closed loop.
	Rate  float64
	Steps []Step
	// Connections bounds the requests in flight: an open-loop run's
	// workers, a closed-loop run's connections.
	Connections int
	// Duration is the measured part of the run; Warmup runs before it,
	// unmeasured, at the first rate. Requests, in closed loop, ends the
	// run after that many answers or errors instead.
	Duration, Warmup time.Duration
	Requests         int64
	// Timeout bounds one request (default 10 s).
	Timeout time.Duration
	// Progress, when set, is called about once a second with the run so
	// far, from a goroutine of its own.
	Progress func(Progress)
}

// MaxConnections bounds Options.Connections: each is a goroutine and a
// connection.
const MaxConnections = 10_000

// Progress is a run so far.
type Progress struct {
	Elapsed          time.Duration
	Requests, Errors int64
	// Rate is the answers of the last whole second.
	Rate float64
	// P99 is over every answer so far.
	P99 time.Duration
}

// Check reports what in o cannot run, as Run would, without changing o:
// a caller refuses bad options before it sends anything.
func (o Options) Check() error { return o.check() }

// check fills o's defaults and refuses what cannot run.
func (o *Options) check() error {
	if o.Method == "" {
		o.Method = fasthttp.MethodGet
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Rate > 0 {
		if len(o.Steps) > 0 {
			return errors.New("a fixed rate or steps, not both")
		}
		o.Steps = []Step{{From: o.Rate, To: o.Rate, For: o.Duration}}
	}
	if len(o.Steps) > 0 {
		o.Duration = 0
		for _, s := range o.Steps {
			o.Duration += s.For
		}
	}
	switch {
	case o.Connections < 1 || o.Connections > MaxConnections:
		return fmt.Errorf("connections must be from 1 to %d", MaxConnections)
	case o.Duration <= 0 && o.Requests <= 0:
		return errors.New("a duration or a number of requests is needed")
	case o.Requests > 0 && len(o.Steps) > 0:
		return errors.New("a number of requests ends a closed-loop run; an open-loop run ends with its schedule")
	case o.Rate < 0 || o.Timeout < 0 || o.Warmup < 0:
		return errors.New("rate, timeout and warmup must not be negative")
	}
	return nil
}

// Run sends load as described and returns the measurements. It ends early
// with ctx (and ctx's error).
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	u, err := CheckTarget(o.URL, o.AllowRemote)
	if err != nil {
		return Result{}, err
	}
	// A client, and its one connection, per worker: a shared pool's lock
	// would be taken twice a request by every worker.
	clients := make([]*fasthttp.HostClient, o.Connections)
	for i := range clients {
		clients[i] = newClient(u, o.Timeout)
	}
	defer func() { // the run's connections end with it
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	if o.Warmup > 0 {
		warm := o
		warm.Duration, warm.Requests, warm.Progress = o.Warmup, 0, nil
		if len(o.Steps) > 0 {
			warm.Steps = []Step{{From: o.Steps[0].From, To: o.Steps[0].From, For: o.Warmup}}
			if o.Steps[0].From == 0 {
				warm.Steps[0].From, warm.Steps[0].To = o.Steps[0].To, o.Steps[0].To
			}
		}
		if _, err := run(ctx, clients, warm); err != nil {
			return Result{}, err
		}
	}
	return run(ctx, clients, o)
}

// newClient is one worker's client: one connection, and one attempt per
// request. fasthttp's default sends an idempotent request again, up to
// five times, when its connection fails, and counts the request once: a
// request cut by a draining pod or a killed process would be an answer in
// the count, and a run would report what no client that never resends (any
// POST) would see. Every failure is the run's, with its cause.
func newClient(u *url.URL, timeout time.Duration) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr: HostPort(u), IsTLS: u.Scheme == "https", MaxConns: 1, MaxConnWaitTimeout: timeout,
		NoDefaultUserAgentHeader: true,
		// Below the platform's servers' idle timeout (90 s): the client,
		// not the server, closes an idle connection, so that no request
		// meets one the server closed a moment before.
		MaxIdleConnDuration:       time.Minute,
		MaxIdemponentCallAttempts: 1,
	}
}

// HostPort is the address a target URL is served on: its port, or its
// scheme's.
func HostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// CheckTarget parses a target URL, refusing one off this machine unless
// allowRemote: load tests stay on loopback by default.
func CheckTarget(target string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("target %q: want an http:// or https:// URL", target)
	}
	if !allowRemote {
		if err := checkLoopback(u.Hostname()); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// checkLoopback refuses a target that is not on this machine.
func checkLoopback(host string) error {
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("target %q is not a loopback address: load goes to 127.0.0.0/8 or ::1 unless remote targets are allowed", host)
	}
	return nil
}

func run(ctx context.Context, clients []*fasthttp.HostClient, o Options) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sched *schedule
	if len(o.Steps) > 0 {
		var err error
		if sched, err = newSchedule(o.Steps); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	agg := newAggregator(start, o.Timeout)
	var (
		next   atomic.Int64 // open loop: the next request due; closed: requests started
		wg     sync.WaitGroup
		stopAt = start.Add(o.Duration)
	)
	if o.Duration <= 0 {
		stopAt = start.Add(100 * 365 * 24 * time.Hour) // a count of requests ends it
	}
	for _, client := range clients {
		w := &worker{agg: agg, start: start, stopAt: stopAt, sched: sched, next: &next, limit: o.Requests}
		wg.Go(func() { w.run(ctx, client, o) })
	}
	// The progress reporter ends before Run returns, so nothing it writes
	// can interleave with what the caller writes next (the summary).
	done, followed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(followed)
		agg.follow(ctx, done, o.Progress)
	}()
	wg.Wait()
	close(done)
	<-followed
	if err := context.Cause(ctx); err != nil && ctx.Err() != context.Canceled {
		return Result{}, err
	}
	return agg.result(time.Since(start)), nil
}

// worker is one connection's share of the run.
type worker struct {
	agg           *aggregator
	start, stopAt time.Time
	sched         *schedule
	next          *atomic.Int64
	limit         int64
	buf           []sample
	done          <-chan struct{} // the run's end, ctx.Done
	timer         *time.Timer     // waits for the next request due, reused
}

// maxBuffered bounds the samples a worker keeps before it hands them to
// the aggregator.
const maxBuffered = 256

func (w *worker) run(ctx context.Context, client *fasthttp.HostClient, o Options) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(o.URL)
	req.Header.SetMethod(o.Method)
	for _, h := range o.Header {
		req.Header.Set(h[0], h[1])
	}
	req.SetBody(o.Body)
	w.buf = make([]sample, 0, maxBuffered)
	defer w.flush()
	w.done = ctx.Done() // read once: ctx.Err takes a lock every worker would share
	for {
		select {
		case <-w.done:
			return
		default:
		}
		sent, ok := w.due()
		if !ok {
			return
		}
		err := client.DoTimeout(req, resp, o.Timeout)
		now := time.Now()
		s := sample{at: now.Sub(w.start), latency: now.Sub(sent), code: resp.StatusCode()}
		if err != nil {
			s.code, s.err = 0, errorKind(err)
		}
		w.buf = append(w.buf, s)
		if len(w.buf) == maxBuffered || s.at-w.buf[0].at > 500*time.Millisecond {
			w.flush()
		}
	}
}

// due waits for the next request's turn and returns the time its latency
// counts from; ok is false when the run is over for this worker.
func (w *worker) due() (sent time.Time, ok bool) {
	if w.sched == nil {
		now := time.Now()
		// The shared count, a contended cache line, only when it ends the run.
		return now, (w.limit == 0 || w.next.Add(1) <= w.limit) && now.Before(w.stopAt)
	}
	k := w.next.Add(1) - 1
	offset, ok := w.sched.at(k)
	if !ok {
		return time.Time{}, false
	}
	intended := w.start.Add(offset)
	// Behind schedule, latency counts from the intended time, so the
	// queueing shows (no coordinated omission). A worker that was idle
	// counts from its wake-up: the timer's lateness is the generator's,
	// not the server's.
	if d := time.Until(intended); d > 0 {
		if d > 100*time.Millisecond {
			w.flush() // a long wait: the progress line should not lag
		}
		if !w.wait(d) {
			return time.Time{}, false
		}
		return time.Now(), true
	}
	return intended, true
}

// wait sleeps for d, or until the run ends (false): at a low rate a
// worker may wait long for its next request.
func (w *worker) wait(d time.Duration) bool {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-w.timer.C:
		return true
	case <-w.done:
		w.timer.Stop()
		return false
	}
}

func (w *worker) flush() {
	if len(w.buf) > 0 {
		w.agg.add(w.buf)
		w.buf = w.buf[:0]
	}
}
