package load

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/eventually"
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

// An open-loop run sends exactly the requests its schedule holds, with
// its method, headers and body, whatever the server's speed.
func TestOpenLoopSendsTheSchedule(t *testing.T) {
	var got, right atomic.Int64
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		got.Add(1)
		if string(ctx.Method()) == "POST" && string(ctx.Request.Header.Peek("X-Test")) == "1" && string(ctx.PostBody()) == "hi" {
			right.Add(1)
		}
		ctx.SetStatusCode(418)
	})
	r, err := Run(context.Background(), Options{URL: url + "/teapot", Method: "POST", Header: [][2]string{{"X-Test", "1"}},
		Body: []byte("hi"), Rate: 1000, Connections: 8, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 300 || got.Load() != 300 || right.Load() != 300 || r.Codes[418] != 300 || r.Errors != 0 {
		t.Errorf("result %d requests, codes %v, %d errors; server saw %d (%d right): want 300 answered 418", r.Requests, r.Codes, r.Errors, got.Load(), right.Load())
	}
	if l := r.Latency; l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
		t.Errorf("latencies out of order: %+v", l)
	}
}

// Coordinated omission: the server stalls for a second mid-run. Every
// request due during the stall waits for its end, counted from when it
// was due, so the stall shows in the tail as it would to users: the p99
// near the whole second, the p90 well into it.
func TestStallShowsInTheTail(t *testing.T) {
	var first atomic.Int64
	url := serve(t, func(*fasthttp.RequestCtx) {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		since := time.Duration(now - first.Load())
		if since >= time.Second && since < 2*time.Second {
			time.Sleep(2*time.Second - since)
		}
	})
	r, err := Run(context.Background(), Options{URL: url, Rate: 200, Connections: 400, Duration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 600 {
		t.Fatalf("%d answers, want 600", r.Requests)
	}
	if r.Latency.P99 < 900*time.Millisecond || r.Latency.P90 < 500*time.Millisecond {
		t.Errorf("p90 %v, p99 %v: want the 200 requests due during the 1 s stall in the tail", r.Latency.P90, r.Latency.P99)
	}
}

// A server slower than the rate makes later requests wait for a
// connection, and their latency, from the intended send time, shows it.
func TestOpenLoopCountsQueueing(t *testing.T) {
	url := serve(t, func(*fasthttp.RequestCtx) { time.Sleep(20 * time.Millisecond) })
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
	n, err := Run(context.Background(), Options{URL: url, Connections: 3, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n.Requests != 100 {
		t.Errorf("--requests 100: %d answers", n.Requests)
	}
}

// Seconds hold each second's answers; their sum is the run's, and the
// histogram survives JSON.
func TestSecondsAndJSON(t *testing.T) {
	url := serve(t, func(*fasthttp.RequestCtx) {})
	r, err := Run(context.Background(), Options{URL: url, Steps: []Step{{From: 100, To: 300, For: 2 * time.Second}}, Connections: 8})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, s := range r.Seconds {
		sum += s.Requests
	}
	if r.Requests != 400 || sum != r.Requests || len(r.Seconds) < 2 || r.Seconds[1].Requests <= r.Seconds[0].Requests {
		t.Errorf("%d requests, seconds %+v: want 400, rising with the ramp", r.Requests, r.Seconds)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if h := hdrhistogram.Import(back.Histogram); h.TotalCount() != r.Requests || latencyOf(h) != r.Latency {
		t.Errorf("histogram after JSON: %d values, %+v; want %d, %+v", h.TotalCount(), latencyOf(h), r.Requests, r.Latency)
	}
}

func TestTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r, err := Run(context.Background(), Options{URL: "http://" + addr, Connections: 1, Requests: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 3 || r.TransportErrors["connection refused"] != 3 || r.Requests != 0 {
		t.Errorf("errors %d %v, requests %d: want 3 refused", r.Errors, r.TransportErrors, r.Requests)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"remote", Options{URL: "http://10.0.0.1:80/", Connections: 1, Duration: time.Second}, "not a loopback address"},
		{"remote name", Options{URL: "http://example.com/", Connections: 1, Duration: time.Second}, "not a loopback address"},
		{"not a URL", Options{URL: "localhost:80", Connections: 1, Duration: time.Second}, "want an http:// or https:// URL"},
		{"no connections", Options{URL: "http://127.0.0.1:1/", Duration: time.Second}, "connections must be"},
		{"no end", Options{URL: "http://127.0.0.1:1/", Connections: 1}, "a duration or a number of requests"},
		{"rate and requests", Options{URL: "http://127.0.0.1:1/", Connections: 1, Rate: 5, Requests: 5, Duration: time.Second}, "ends a closed-loop run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A run keeps its first MaxSeconds seconds and counts the rest, so its
// memory stops growing however long it runs.
func TestSecondsBounded(t *testing.T) {
	a := newAggregator(time.Now(), time.Second)
	a.done = make([]Second, MaxSeconds-1)
	a.lastDone = MaxSeconds - 2
	for i := range 3 {
		at := time.Duration(MaxSeconds-1+i) * time.Second
		a.add([]sample{{at: at, latency: time.Millisecond, code: 200}})
	}
	r := a.result(time.Duration(MaxSeconds+2) * time.Second)
	if len(r.Seconds) != MaxSeconds || r.SecondsLeftOut != 2 || r.Requests != 3 {
		t.Errorf("%d seconds kept, %d left out, %d requests: want %d, 2, 3", len(r.Seconds), r.SecondsLeftOut, r.Requests, MaxSeconds)
	}
}

// A run ends with its context at once, even while its workers wait for
// requests due far ahead at a low rate.
func TestCancelEndsTheWait(t *testing.T) {
	url := serve(t, func(*fasthttp.RequestCtx) {})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, Options{URL: url, Rate: 1, Connections: 50, Duration: time.Minute})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("Run = %+v, %v after %v: want the deadline's error at once", r.Requests, err, time.Since(start))
	}
}

// Run returns only after its last progress report: a caller writes its
// summary to the same terminal next, and the two must not interleave.
func TestProgressEndsBeforeRunReturns(t *testing.T) {
	url := serve(t, func(*fasthttp.RequestCtx) {})
	var returned, late atomic.Bool
	var once sync.Once
	reported := make(chan struct{})
	progress := func(Progress) {
		once.Do(func() {
			defer close(reported)
			// The first report holds on until Run has returned, or long
			// past the run's end; had Run not waited for it, it sees so.
			eventually.Holds(3*time.Second, returned.Load)
			late.Store(returned.Load())
		})
	}
	_, err := Run(context.Background(), Options{URL: url, Rate: 10, Connections: 1, Duration: 1500 * time.Millisecond, Progress: progress})
	returned.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
	case <-time.After(eventually.Within):
		t.Fatal("no progress report in a run of 1.5 s")
	}
	if late.Load() {
		t.Error("a progress report ran after Run returned")
	}
}

// rawServer serves HTTP/1.1 over raw connections, handing each request
// read (its number, from 0, across connections) to answer, which writes
// to the connection what it will and says whether to keep it. open counts
// the connections the client has not closed.
func rawServer(t *testing.T, answer func(n int64, c *net.TCPConn) (keep bool)) (url string, open *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	open = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Add(1)
			go func() {
				defer open.Add(-1)
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if !answer(n.Add(1)-1, c.(*net.TCPConn)) {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), open
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// A request whose connection closes before its answer is a failure, counted
// once and never sent again: the server answers two requests in three and
// closes the connection on the third, and the run has one error for each
// closed connection, one answer for each answer given.
func TestClosedConnectionsCountedOnce(t *testing.T) {
	var answered, cut atomic.Int64
	url, open := rawServer(t, func(n int64, c *net.TCPConn) bool {
		if n%3 == 2 {
			cut.Add(1)
			return false
		}
		answered.Add(1)
		_, err := c.Write([]byte(okAnswer))
		return err == nil
	})
	r, err := Run(context.Background(), Options{URL: url, Connections: 4, Requests: 300})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != answered.Load() || r.Errors != cut.Load() || r.TransportErrors["connection closed"] != cut.Load() ||
		answered.Load()+cut.Load() != 300 {
		t.Errorf("run: %d answers, %d errors %v; server: %d answered, %d cut: want every request sent once and each cut one counted",
			r.Requests, r.Errors, r.TransportErrors, answered.Load(), cut.Load())
	}
	// Its connections end with the run, not a minute later when idle.
	eventually.True(t, "the run's connections closed", func() bool { return open.Load() == 0 })
}

// A connection reset mid-answer (half the body written, then an RST) is a
// failure counted once, as a reset.
func TestResetMidResponseCountedOnce(t *testing.T) {
	var reset atomic.Int64
	url, _ := rawServer(t, func(n int64, c *net.TCPConn) bool {
		if n%2 == 1 {
			reset.Add(1)
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"))
			_ = c.SetLinger(0) // close with an RST
			return false
		}
		_, err := c.Write([]byte(okAnswer))
		return err == nil
	})
	r, err := Run(context.Background(), Options{URL: url, Connections: 2, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if reset.Load() != 50 || r.Errors != 50 || r.Requests != 50 || r.TransportErrors["connection reset"]+r.TransportErrors["connection closed"] != 50 {
		t.Errorf("run: %d answers, %d errors %v; server reset %d: want 50 and 50", r.Requests, r.Errors, r.TransportErrors, reset.Load())
	}
	if r.TransportErrors["connection reset"] == 0 {
		t.Errorf("errors %v: want the resets named", r.TransportErrors)
	}
}

// A server that closes idle connections sooner than the client's next
// request makes that request fail on the connection it reused: each such
// failure counted once, and the request is not sent again on a new one.
func TestIdleClosedConnectionsCountedOnce(t *testing.T) {
	var answered atomic.Int64
	srv := &fasthttp.Server{Handler: func(*fasthttp.RequestCtx) { answered.Add(1) }, IdleTimeout: 20 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	r, err := Run(context.Background(), Options{URL: "http://" + ln.Addr().String(), Rate: 10, Duration: 2 * time.Second, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != answered.Load() || r.Requests+r.Errors != 20 || r.Errors == 0 || r.TransportErrors["connection closed"] != r.Errors {
		t.Errorf("run: %d answers, %d errors %v; server answered %d: want 20 sent once each, those on closed connections failed",
			r.Requests, r.Errors, r.TransportErrors, answered.Load())
	}
}
