package loadgen

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// TestOpenLoopSendsTheSchedule checks that a fixed-rate run sends exactly
// the requests scheduled in its duration, whatever the server's speed.
func TestOpenLoopSendsTheSchedule(t *testing.T) {
	var got atomic.Int64
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		got.Add(1)
		if string(ctx.Path()) == "/teapot" {
			ctx.SetStatusCode(418)
		}
	})
	r, err := Run(context.Background(), Options{URL: url + "/teapot", Rate: 1000, Connections: 8, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 300 || got.Load() != 300 || r.Codes[418] != 300 || r.Errors != 0 {
		t.Errorf("result %+v, server saw %d; want 300 requests answered 418", r, got.Load())
	}
	if r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
		t.Errorf("latencies out of order: %+v", r.Latency)
	}
}

// TestOpenLoopCountsQueueing: a server slower than the rate makes later
// requests wait for a connection, and their latency, measured from the
// intended send time, shows that wait.
func TestOpenLoopCountsQueueing(t *testing.T) {
	url := serve(t, func(*fasthttp.RequestCtx) { time.Sleep(20 * time.Millisecond) })
	// One connection, a request every 5 ms, each taking 20 ms: the queue
	// grows and the last requests wait for most of the run.
	r, err := Run(context.Background(), Options{URL: url, Rate: 200, Connections: 1, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Latency.Max < 4*20*time.Millisecond {
		t.Errorf("max latency %v does not show the queueing behind a 20 ms server", r.Latency.Max)
	}
}

func TestClosedLoop(t *testing.T) {
	url := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	r, err := Run(context.Background(), Options{URL: url, Connections: 4, Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 || r.Codes[200] != r.Requests || r.Throughput <= 0 {
		t.Errorf("closed loop result %+v", r)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	for _, target := range []string{"http://10.0.0.1:80/", "http://192.168.1.1:8080/", "http://example.com:80/"} {
		_, err := Run(context.Background(), Options{URL: target, Connections: 1, Duration: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("Run(%s) = %v, want a refusal", target, err)
		}
	}
}
