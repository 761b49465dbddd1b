package activator

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"sless.dev/sless/invocation"
)

// BenchmarkHandler runs the whole handler (route, request id, throttler,
// pooled client call to an in-memory instance, metrics, invocation record)
// to show what the steady-state path allocates per request.
func BenchmarkHandler(b *testing.B) {
	for _, tc := range []struct {
		name string
		id   string // the client's X-Request-Id; none makes the activator generate one
	}{{"with request id", "abc"}, {"generated request id", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			a := benchActivator(b)
			var req fasthttp.Request
			req.SetRequestURI("/fn/ns/fn/hello?x=1")
			req.Header.SetHost("sless.local")
			if tc.id != "" {
				req.Header.Set("X-Request-Id", tc.id)
			}
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}, nil) // allocates once
			b.ReportAllocs()
			for b.Loop() {
				req.CopyTo(&ctx.Request)
				ctx.Response.Reset()
				a.ServeHTTP(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}

func benchActivator(b *testing.B) *Activator {
	ln := fasthttputil.NewInmemoryListener()
	instance := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("hello") }}
	go func() { _ = instance.Serve(ln) }()
	b.Cleanup(func() { _ = instance.Shutdown() })
	cfg := Config{Dial: func(string, time.Duration) (net.Conn, error) { return ln.Dial() }}
	a, err := New(cfg, nil, invocation.NewRing(1000), prometheus.NewRegistry(), quiet)
	if err != nil {
		b.Fatal(err)
	}
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "fn", HTTP: true, Timeout: time.Minute})
	a.SetEndpoints("ns", "fn", []string{"instance.test:8012"})
	return a
}
