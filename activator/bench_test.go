package activator

import (
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy/queueproxytest"
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

// BenchmarkWebSocketEcho is the round trip of a small message over an
// open WebSocket to a function process (internal/testfn's /ws, real
// processes on loopback): direct; through a bare TCP relay (a goroutine
// copying each way, the floor of any hop that relays), one and two of
// them; through its queue-proxy; and through the activator and the
// queue-proxy. Its ratios are in benchmarks/RESULTS.md.
func BenchmarkWebSocketEcho(b *testing.B) {
	instance := queueproxytest.Start(b)
	a := newActivator(b, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "ws", HTTP: true, Timeout: time.Minute})
	a.SetEndpoints("ns", "ws", []string{instance.Addr})
	via := serveActivator(b, a)
	relay := tcpRelay(b, instance.Function.Addr())
	for _, path := range []struct{ name, url string }{
		{"direct", "ws://" + instance.Function.Addr() + "/ws"},
		{"tcp relay", "ws://" + relay + "/ws"},
		{"tcp relay x2", "ws://" + tcpRelay(b, relay) + "/ws"},
		{"queue-proxy", "ws://" + instance.Addr + "/ws"},
		{"activator+queue-proxy", "ws" + strings.TrimPrefix(via, "http") + "/fn/ns/ws/ws"},
	} {
		b.Run(path.name, func(b *testing.B) {
			conn, _ := testfn.DialWebSocket(b, path.url)
			msg := []byte("0123456789abcdef0123456789abcdef")
			for b.Loop() {
				if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
					b.Fatal(err)
				}
				if _, _, err := conn.ReadMessage(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamFirstByte is the time to the first byte of a streamed
// answer (internal/testfn's /events: an event flushed at once, the next
// 2 ms later), by a client keeping one connection, on the paths
// BenchmarkWebSocketEcho takes. ns/op is a whole answer; ttfb-p50-µs the
// median time from the request to its first body byte.
func BenchmarkStreamFirstByte(b *testing.B) {
	instance := queueproxytest.Start(b)
	a := newActivator(b, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "sse", HTTP: true, Timeout: time.Minute})
	a.SetEndpoints("ns", "sse", []string{instance.Addr})
	via := serveActivator(b, a)
	relay := tcpRelay(b, instance.Function.Addr())
	for _, path := range []struct{ name, url string }{
		{"direct", "http://" + instance.Function.Addr() + "/events"},
		{"tcp relay", "http://" + relay + "/events"},
		{"tcp relay x2", "http://" + tcpRelay(b, relay) + "/events"},
		{"queue-proxy", "http://" + instance.Addr + "/events"},
		{"activator+queue-proxy", via + "/fn/ns/sse/events"},
	} {
		b.Run(path.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
			b.Cleanup(client.CloseIdleConnections)
			var firsts []time.Duration
			first := make([]byte, 1)
			for b.Loop() {
				start := time.Now()
				resp, err := client.Get(path.url)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, first); err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("%d: %v", resp.StatusCode, err)
				}
				firsts = append(firsts, time.Since(start))
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			slices.Sort(firsts)
			b.ReportMetric(float64(firsts[len(firsts)/2])/1e3, "ttfb-p50-µs")
		})
	}
}

// tcpRelay listens on loopback and relays each connection to to, a
// goroutine copying each way, until the benchmark ends.
func tcpRelay(b *testing.B, to string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			b.Cleanup(func() { _ = c.Close(); _ = up.Close() })
			go func() { _, _ = io.Copy(up, c) }()
			go func() { _, _ = io.Copy(c, up) }()
		}
	}()
	return ln.Addr().String()
}
