// Package loadgen is sless's HTTP load generator: a fasthttp client that
// runs either open-loop at a fixed rate, with latency measured from each
// request's intended send time so that a stalled server cannot hide its
// queueing (no coordinated omission), or closed-loop, each connection
// sending as soon as its previous answer arrives, for maximum throughput.
//
// It only sends to loopback addresses: load tests here never leave the
// machine.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options describe one run.
type Options struct {
	// URL is the target, on a loopback address.
	URL string
	// Method defaults to GET; Body is sent with every request.
	Method string
	Body   []byte
	// Rate is the open-loop request rate per second; 0 runs closed-loop.
	Rate float64
	// Connections is the number of concurrent connections, each with one
	// request outstanding at most.
	Connections int
	// Duration is the measured part of the run; Warmup runs before it,
	// unmeasured.
	Duration, Warmup time.Duration
	// Timeout bounds one request (default 10 s).
	Timeout time.Duration
	// MaxSamples bounds the latencies kept (default 4 Mi); a longer run
	// keeps the first ones and counts the rest.
	MaxSamples int
}

// Result is what a run measured.
type Result struct {
	Requests   int64         // answered, any status
	Errors     int64         // transport errors and timeouts
	Codes      map[int]int64 // answers by status code
	Elapsed    time.Duration
	Throughput float64 // answers per second
	Latency    Latency
}

// Latency holds percentiles of the measured latencies.
type Latency struct {
	P50, P90, P99, P999, Max time.Duration
}

// Run sends load as described and returns the measurements.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return Result{}, fmt.Errorf("target %q: %w", o.URL, err)
	}
	if err := checkLoopback(u.Host); err != nil {
		return Result{}, err
	}
	client := &fasthttp.HostClient{
		Addr:                     u.Host,
		MaxConns:                 o.Connections,
		MaxConnWaitTimeout:       o.Timeout,
		NoDefaultUserAgentHeader: true,
		MaxIdleConnDuration:      time.Minute,
	}
	if o.Warmup > 0 {
		warm := o
		warm.Duration = o.Warmup
		if _, err := run(ctx, client, warm, 0); err != nil {
			return Result{}, err
		}
	}
	return run(ctx, client, o, o.MaxSamples)
}

func (o *Options) defaults() error {
	if o.Method == "" {
		o.Method = fasthttp.MethodGet
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxSamples == 0 {
		o.MaxSamples = 4 << 20
	}
	switch {
	case o.Connections < 1:
		return errors.New("loadgen: Connections must be at least 1")
	case o.Duration <= 0:
		return errors.New("loadgen: Duration must be positive")
	case o.Rate < 0:
		return errors.New("loadgen: Rate must not be negative")
	}
	return nil
}

// checkLoopback refuses any target that is not on this machine.
func checkLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("loadgen: target %q: %w", hostport, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("loadgen: target %q is not a loopback address; load is only sent to 127.0.0.0/8 or ::1", host)
	}
	return nil
}

// worker is one connection's share of the run.
type worker struct {
	latencies []time.Duration
	codes     map[int]int64
	requests  int64
	errors    int64
}

func run(ctx context.Context, client *fasthttp.HostClient, o Options, maxSamples int) (Result, error) {
	var (
		next    atomic.Int64 // open loop: index of the next scheduled request
		wg      sync.WaitGroup
		workers = make([]*worker, o.Connections)
		start   = time.Now()
		end     = start.Add(o.Duration)
	)
	interval := time.Duration(0)
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) / o.Rate)
	}
	for i := range workers {
		w := &worker{codes: map[int]int64{}, latencies: make([]time.Duration, 0, min(maxSamples/o.Connections, 1<<16))}
		workers[i] = w
		wg.Go(func() { w.run(ctx, client, o, start, end, interval, &next, maxSamples/o.Connections) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return merge(workers, time.Since(start)), nil
}

func (w *worker) run(ctx context.Context, client *fasthttp.HostClient, o Options, start, end time.Time,
	interval time.Duration, next *atomic.Int64, maxSamples int) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(o.URL)
	req.Header.SetMethod(o.Method)
	req.SetBody(o.Body)
	for ctx.Err() == nil {
		sent := time.Now()
		if interval > 0 {
			intended := start.Add(time.Duration(next.Add(1)-1) * interval)
			if !intended.Before(end) {
				return
			}
			// A worker behind schedule measures from the intended time,
			// so queueing shows (no coordinated omission). A worker
			// that was idle measures from its wake-up: the timer's
			// lateness is the generator's, not the server's.
			if d := time.Until(intended); d > 0 {
				time.Sleep(d)
				sent = time.Now()
			} else {
				sent = intended
			}
		} else if !sent.Before(end) {
			return
		}
		err := client.DoTimeout(req, resp, o.Timeout)
		latency := time.Since(sent)
		if err != nil {
			w.errors++
			continue
		}
		w.requests++
		w.codes[resp.StatusCode()]++
		if len(w.latencies) < maxSamples {
			w.latencies = append(w.latencies, latency)
		}
	}
}

func merge(workers []*worker, elapsed time.Duration) Result {
	r := Result{Codes: map[int]int64{}, Elapsed: elapsed}
	var all []time.Duration
	for _, w := range workers {
		r.Requests += w.requests
		r.Errors += w.errors
		for c, n := range w.codes {
			r.Codes[c] += n
		}
		all = append(all, w.latencies...)
	}
	r.Throughput = float64(r.Requests) / elapsed.Seconds()
	slices.Sort(all)
	r.Latency = Latency{
		P50: percentile(all, 0.50), P90: percentile(all, 0.90), P99: percentile(all, 0.99),
		P999: percentile(all, 0.999), Max: percentile(all, 1),
	}
	return r
}

// percentile of sorted latencies, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
