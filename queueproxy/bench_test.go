package queueproxy

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// BenchmarkBreaker measures the uncontended-slot fast path from many
// goroutines: capacity above the parallelism, so nothing waits.
func BenchmarkBreaker(b *testing.B) {
	acquireRelease(b, NewBreaker(1024, 0))
}

// BenchmarkBreakerContended has more goroutines than slots, so requests
// queue and hand slots over.
func BenchmarkBreakerContended(b *testing.B) {
	b.SetParallelism(16)
	acquireRelease(b, NewBreaker(2, 1<<20))
}

// acquireRelease takes and gives back a slot of br from b's goroutines.
func acquireRelease(b *testing.B, br *Breaker) {
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			slot, err := br.Acquire(deadline, nil)
			if err != nil {
				b.Error(err)
				return
			}
			slot.Release()
		}
	})
}

// BenchmarkStats measures the critical section every request enters twice.
func BenchmarkStats(b *testing.B) {
	s := NewStats(time.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			s.In(now)
			s.Out(now)
		}
	})
}

// BenchmarkProxyHandler runs the whole handler (stats, breaker, request
// rewrite, pooled client call, metrics) against an in-memory function, to
// show the steady-state path allocates nothing per request.
func BenchmarkProxyHandler(b *testing.B) {
	for _, concurrency := range []int{0, 8} {
		b.Run(map[int]string{0: "unlimited", 8: "breaker"}[concurrency], func(b *testing.B) {
			p := benchProxy(b, concurrency)
			var req fasthttp.Request
			req.SetRequestURI("http://fn.local/hello?x=1")
			req.Header.Set("X-Request-Id", "abc")
			remote := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, remote, nil) // allocates a fake connection: once
			b.ReportAllocs()
			for b.Loop() {
				req.CopyTo(&ctx.Request)
				ctx.Response.Reset()
				p.ServeHTTP(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}

func benchProxy(b *testing.B, concurrency int) *proxy {
	ln := fasthttputil.NewInmemoryListener()
	user := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("hello") }}
	go func() { _ = user.Serve(ln) }()
	b.Cleanup(func() { _ = user.Shutdown() })
	cfg := Config{Namespace: "ns", Function: "fn", UserPort: 1, Concurrency: concurrency,
		QueueDepth: 10 * concurrency, Timeout: time.Minute}
	m, err := newMetrics(prometheus.NewRegistry(), "ns", "fn", 0, func() float64 { return 0 }, func() float64 { return 0 })
	if err != nil {
		b.Fatal(err)
	}
	p := newProxy(cfg, NewStats(time.Now()), m, func() {}, slog.New(slog.DiscardHandler))
	p.client.Dial = func(string, time.Duration) (net.Conn, error) { return ln.Dial() }
	return p
}
