package queueproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
)

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	os.Exit(m.Run())
}

// harness is a real queue-proxy in front of a real function process.
type harness struct {
	t      *testing.T
	srv    *Server
	fn     *testfn.Process
	url    string // serving port
	admin  string // admin port
	client *http.Client
	cancel context.CancelFunc
	done   chan error
}

// startProxy starts a harness whose drain ends once no request came for
// 50 ms.
func startProxy(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	return startProxyQuiet(t, 50*time.Millisecond, mutate)
}

func startProxyQuiet(t *testing.T, quiet time.Duration, mutate func(*Config)) *harness {
	t.Helper()
	fn := testfn.Start(t)
	cfg := Config{
		Namespace: "ns", Function: "fn", UserPort: fn.Port,
		Timeout: 10 * time.Second, MaxBodyBytes: 10 << 20, DrainTimeout: 10 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 10 * cfg.Concurrency
	}
	srv, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.QuietPeriod = quiet
	serving, admin := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{
		t: t, srv: srv, fn: fn, cancel: cancel, done: make(chan error, 1),
		url:    "http://" + serving.Addr().String(),
		admin:  "http://" + admin.Addr().String(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
	}
	go func() { h.done <- srv.Run(ctx, serving, admin) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Error("queue-proxy did not stop")
		}
	})
	eventually.True(h.t, "ready", srv.Ready)
	return h
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (h *harness) do(req *http.Request) (*http.Response, []byte) {
	h.t.Helper()
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

func (h *harness) get(base, path string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.do(req)
}

// getAsync sends a GET in the background; the result arrives on the
// returned channel.
func (h *harness) getAsync(path string) <-chan int { return h.getAsyncFrom(h.url + path) }

// getAsyncFrom sends a GET to url in the background.
func (h *harness) getAsyncFrom(url string) <-chan int {
	out := make(chan int, 1)
	go func() {
		resp, err := h.client.Get(url)
		if err != nil {
			out <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- resp.StatusCode
	}()
	return out
}

func (h *harness) stats() wire.Stats {
	h.t.Helper()
	_, body := h.get(h.admin, wire.StatsPath)
	var r wire.Stats
	if err := json.Unmarshal(body, &r); err != nil {
		h.t.Fatalf("stats %q: %v", body, err)
	}
	return r
}

func TestProxyFidelity(t *testing.T) {
	h := startProxy(t, nil)
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	for _, method := range methods {
		t.Run(method, func(t *testing.T) {
			body := []byte("payload for " + method + "\x00\xff")
			req, _ := http.NewRequest(method, h.url+"/echo?b=2&a=1&sp=%20x%2F&empty=&status=201", bytes.NewReader(body))
			req.Header.Add("X-Multi", "one")
			req.Header.Add("X-Multi", "two")
			req.Header.Set("X-Forwarded-For", "203.0.113.7")
			req.Header.Set("Keep-Alive", "timeout=5")
			req.Header.Set("Proxy-Authorization", "Basic secret")
			req.Header.Set("Te", "trailers")
			req.Header.Set("Upgrade", "websocket")
			req.Host = "hello.default.example.com"
			resp, raw := h.do(req)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("status = %d, want 201 (body %s)", resp.StatusCode, raw)
			}
			if got := resp.Header.Values("X-Reply"); strings.Join(got, ",") != "one,two" {
				t.Errorf("response X-Reply = %q, want one,two", got)
			}
			if resp.Header.Get("Keep-Alive") != "" {
				t.Errorf("hop-by-hop Keep-Alive reached the client")
			}
			if resp.Header.Get("Content-Length") != strconv.Itoa(len(raw)) {
				t.Errorf("response Content-Length = %q, body %d bytes", resp.Header.Get("Content-Length"), len(raw))
			}
			var e testfn.Echo
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("echo %q: %v", raw, err)
			}
			if e.Method != method || e.URI != "/echo?b=2&a=1&sp=%20x%2F&empty=&status=201" || e.Host != req.Host {
				t.Errorf("function saw %s %s host %s", e.Method, e.URI, e.Host)
			}
			if !bytes.Equal(e.Body, body) || e.ContentLength != int64(len(body)) {
				t.Errorf("function got body %q (Content-Length %d), want %q", e.Body, e.ContentLength, body)
			}
			if got := e.Headers["X-Multi"]; strings.Join(got, ",") != "one,two" {
				t.Errorf("function got X-Multi %q", got)
			}
			if got := e.Headers["X-Forwarded-For"]; len(got) != 1 || got[0] != "203.0.113.7, 127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q, want the client appended", got)
			}
			for _, hop := range []string{"Keep-Alive", "Proxy-Authorization", "Te", "Upgrade", "Connection"} {
				if v, ok := e.Headers[hop]; ok {
					t.Errorf("hop-by-hop %s: %q reached the function", hop, v)
				}
			}
		})
	}
	t.Run("HEAD", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodHead, h.url+"/bytes?n=1000", nil)
		resp, body := h.do(req)
		if resp.StatusCode != 200 || resp.ContentLength != 1000 || len(body) != 0 {
			t.Errorf("HEAD = %d, Content-Length %d, %d body bytes", resp.StatusCode, resp.ContentLength, len(body))
		}
	})
	t.Run("chunked request body", func(t *testing.T) {
		body := strings.Repeat("chunk", 10000)
		req, _ := http.NewRequest(http.MethodPost, h.url+"/echo", io.MultiReader(strings.NewReader(body)))
		req.ContentLength = -1 // sent chunked
		resp, raw := h.do(req)
		var e testfn.Echo
		if err := json.Unmarshal(raw, &e); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, echo %q: %v", resp.StatusCode, raw, err)
		}
		if string(e.Body) != body {
			t.Errorf("function got %d body bytes, want %d", len(e.Body), len(body))
		}
	})
	t.Run("large response", func(t *testing.T) {
		const n = 8 << 20
		resp, body := h.get(h.url, "/bytes?n="+strconv.Itoa(n))
		if resp.StatusCode != 200 || len(body) != n || resp.ContentLength != n {
			t.Fatalf("status %d, %d bytes, Content-Length %d; want 200 and %d", resp.StatusCode, len(body), resp.ContentLength, n)
		}
		for i := range body {
			if body[i] != testfn.Pattern(i) {
				t.Fatalf("byte %d = %q, want %q", i, body[i], testfn.Pattern(i))
			}
		}
	})
}

func TestBodyTooLarge(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	for _, chunked := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/echo", bytes.NewReader(make([]byte, 4096)))
		if chunked {
			req.Body = io.NopCloser(bytes.NewReader(make([]byte, 4096)))
			req.ContentLength = -1
		}
		resp, body := h.do(req)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "request body too large") {
			t.Errorf("chunked=%v: %d %s, want 413 with a JSON error", chunked, resp.StatusCode, body)
		}
	}
	resp, _ := h.do(must(http.NewRequest(http.MethodPost, h.url+"/echo", bytes.NewReader(make([]byte, 1024)))))
	if resp.StatusCode != 200 {
		t.Errorf("a body at the limit got %d, want 200", resp.StatusCode)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestConcurrencyLimit sends 200 concurrent callers through a proxy with
// concurrency 5 and asks the function how many it ever saw at once.
func TestConcurrencyLimit(t *testing.T) {
	const limit, callers = 5, 200
	h := startProxy(t, func(c *Config) { c.Concurrency, c.QueueDepth = limit, callers })
	var wg sync.WaitGroup
	codes := make(chan int, callers)
	for range callers {
		wg.Go(func() { codes <- <-h.getAsync("/sleep?ms=5") })
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Fatalf("a caller got %d, want 200", code)
		}
	}
	_, body := h.get(h.url, "/max")
	if got, _ := strconv.Atoi(string(body)); got != limit {
		t.Errorf("function saw %d requests at once, want exactly the limit %d", got, limit)
	}
}

func TestQueueFull(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency, c.QueueDepth = 1, 1 })
	first := h.getAsync("/block?id=q")
	eventually.True(h.t, "first request in flight", func() bool { return h.srv.inFlight() == 1 })
	second := h.getAsync("/block?id=q")
	eventually.True(h.t, "second request queued", func() bool { return h.srv.queued() == 1 })

	resp, body := h.get(h.url, "/echo")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), `"error":"queue full`) || !strings.Contains(string(body), `"function":"fn"`) {
		t.Errorf("third request: %d Retry-After %q %s; want 503 with Retry-After and a JSON error", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	h.get("http://"+h.fn.Addr(), "/release?id=q") // straight to the function: the proxy is full
	if a, b := <-first, <-second; a != 200 || b != 200 {
		t.Errorf("held requests got %d and %d, want 200", a, b)
	}
}

func TestTimeouts(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency, c.Timeout = 1, time.Second })
	slow := h.getAsync("/sleep?ms=3000")
	eventually.True(h.t, "slow request in flight", func() bool { return h.srv.inFlight() == 1 })
	// Queued behind the slow one, then slow itself: whichever of its
	// queue wait and its own call uses up the second, it gets 504.
	queued := h.getAsync("/sleep?ms=1500")
	eventually.True(h.t, "second request queued", func() bool { return h.srv.queued() == 1 })
	if code := <-slow; code != http.StatusGatewayTimeout {
		t.Errorf("slow request got %d, want 504", code)
	}
	if code := <-queued; code != http.StatusGatewayTimeout {
		t.Errorf("queued request got %d, want 504", code)
	}
	resp, body := h.get(h.url, "/sleep?ms=1500")
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "timeout") {
		t.Errorf("request slower than the timeout: %d %s, want 504 naming the timeout", resp.StatusCode, body)
	}
}

// TestUserProcessDies: a request that kills the user process is answered
// 502 and never marked unsent, though it came on a reused connection (which
// the proxy tries again once, for one the function closed idle): it reached
// the function, and the activator must not send it to another instance to
// crash that one too.
func TestUserProcessDies(t *testing.T) {
	h := startProxy(t, nil)
	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
		t.Fatalf("echo: %d, want 200", resp.StatusCode)
	}
	resp, body := h.get(h.url, "/exit")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "function failed") {
		t.Errorf("request that kills the process: %d %s, want 502 naming the cause", resp.StatusCode, body)
	}
	if resp.Header.Get(forward.UnsentHeader) != "" {
		t.Errorf("request that killed the process marked unsent (%s): the activator would send it again", body)
	}
	h.fn.Wait()
	resp, body = h.get(h.url, "/echo")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
		t.Errorf("request to the dead process: %d %s, want 502 connection refused", resp.StatusCode, body)
	}
	eventually.True(h.t, "not ready", func() bool { r, _ := h.get(h.admin, "/readyz"); return r.StatusCode == 503 })

	h.fn.Restart()
	eventually.True(h.t, "ready again", h.srv.Ready)
	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
		t.Errorf("after restart: %d, want 200", resp.StatusCode)
	}
	if resp, body := h.get(h.url, "/close"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("connection dropped by the function: %d %s, want 502", resp.StatusCode, body)
	}
}

// TestUserProcessStopsWhileDraining: once the queue-proxy drains, the user
// process is about to stop too (a pod's containers get SIGTERM together,
// the function's after its pre-stop sleep). A request that meets the
// process's closed idle connection and then finds the process gone is
// marked unsent, so that the activator sends it to another instance
// rather than fail it.
func TestUserProcessStopsWhileDraining(t *testing.T) {
	h := startProxyQuiet(t, 5*time.Second, nil) // the drain serves on through the steps below
	h.cancel()
	eventually.True(h.t, "/readyz 503 while draining", func() bool { r, _ := h.get(h.admin, "/readyz"); return r.StatusCode == 503 })
	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 { // a connection left idle in the pool
		t.Fatalf("echo while draining: %d, want 200", resp.StatusCode)
	}
	h.fn.Kill()
	resp, body := h.get(h.url, "/echo")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(forward.UnsentHeader) == "" {
		t.Errorf("request to a process gone while draining: %d %q %s, want 502 marked unsent", resp.StatusCode, resp.Header.Get(forward.UnsentHeader), body)
	}
}

func TestReadiness(t *testing.T) {
	h := startProxy(t, nil)
	if resp, body := h.get(h.admin, "/readyz"); resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d %s with the function up, want 200", resp.StatusCode, body)
	}
	select {
	case <-h.srv.FirstReady():
	default:
		t.Fatal("FirstReady not closed once ready")
	}
	h.fn.Kill()
	eventually.True(h.t, "/readyz 503 after the process stopped", func() bool { r, _ := h.get(h.admin, "/readyz"); return r.StatusCode == 503 })
	if resp, _ := h.get(h.admin, "/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz = %d, want 200: the queue-proxy itself is alive", resp.StatusCode)
	}
}

func TestDrain(t *testing.T) {
	h := startProxy(t, nil)
	inFlight := h.getAsync("/block?id=drain")
	eventually.True(h.t, "request in flight", func() bool { return h.srv.inFlight() == 1 })

	h.cancel() // what SIGTERM does in the command
	eventually.True(h.t, "/readyz 503 while draining", func() bool { r, _ := h.get(h.admin, "/readyz"); return r.StatusCode == 503 })
	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
		t.Errorf("request arriving during drain: %d, want 200", resp.StatusCode)
	}
	select {
	case err := <-h.done:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	if resp, _ := h.get("http://"+h.fn.Addr(), "/release?id=drain"); resp.StatusCode != 200 {
		t.Fatalf("release: %d", resp.StatusCode)
	}
	if code := <-inFlight; code != 200 {
		t.Errorf("in-flight request got %d, want 200", code)
	}
	if err := <-h.done; err != nil {
		t.Errorf("Run after drain = %v, want nil", err)
	}
	h.done <- nil // for the cleanup
}

func TestStatsAndMetricsEndpoints(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency = 4 })
	h.stats() // start a fresh interval
	for range 3 {
		h.get(h.url, "/echo")
	}
	h.get(h.url, "/echo?status=404")
	r := h.stats()
	if r.Requests != 4 || r.InFlight != 0 || r.Queued != 0 || r.AverageConcurrency <= 0 {
		t.Errorf("stats = %+v, want 4 requests, nothing in flight, some concurrency", r)
	}
	_, body := h.get(h.admin, "/metrics")
	for _, want := range []string{
		`sless_queueproxy_requests_total{code="200",function="fn",namespace="ns"} 3`,
		`sless_queueproxy_requests_total{code="404",function="fn",namespace="ns"} 1`,
		`sless_queueproxy_request_duration_seconds_count{function="fn",namespace="ns"} 4`,
		`sless_queueproxy_inflight_requests{function="fn",namespace="ns"} 0`,
		`sless_queueproxy_queued_requests{function="fn",namespace="ns"} 0`,
		`sless_queueproxy_concurrency_limit{function="fn",namespace="ns"} `,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestMalformedRequests sends bytes no HTTP client would and checks each
// gets a 4xx, and the proxy keeps serving.
func TestMalformedRequests(t *testing.T) {
	h := startProxy(t, nil)
	host := strings.TrimPrefix(h.url, "http://")
	inputs := []string{
		"GARBAGE\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
		"\x00\x01\x02\xff\xfe\r\n\r\n",
		"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nshort", // body cut off
	}
	for i, in := range inputs {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte(in)); err == nil && i == len(inputs)-1 {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		reply, _ := io.ReadAll(io.LimitReader(conn, 4096))
		conn.Close()
		if !bytes.HasPrefix(reply, []byte("HTTP/1.1 4")) {
			t.Errorf("input %d: reply %q, want a 4xx", i, reply)
		}
	}
	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
		t.Fatalf("after malformed input: %d, want 200", resp.StatusCode)
	}
}

// TestClientHangUpFreesSlot: a client that hangs up leaves the queue at
// once, and one whose request is at the function has the call aborted,
// freeing the slot while the function still works.
func TestClientHangUpFreesSlot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("hang-ups are watched with epoll, on Linux only")
	}
	h := startProxy(t, func(c *Config) { c.Concurrency, c.QueueDepth = 1, 5 })
	rawGet := func(path string) net.Conn {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	holder := rawGet("/block?id=hangup")
	eventually.True(h.t, "holder in flight", func() bool { return h.srv.inFlight() == 1 })
	waiter := rawGet("/echo")
	eventually.True(h.t, "waiter queued", func() bool { return h.srv.queued() == 1 })

	waiter.Close()
	eventually.True(h.t, "waiter out of the queue", func() bool { return h.srv.queued() == 0 })
	if h.srv.inFlight() != 1 {
		t.Fatalf("in flight = %d, want the holder still there", h.srv.inFlight())
	}
	holder.Close()
	eventually.True(h.t, "holder's slot freed", func() bool { return h.srv.inFlight() == 0 })

	if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
		t.Errorf("next request: %d, want 200", resp.StatusCode)
	}
	_, body := h.get(h.admin, "/metrics")
	if want := `sless_queueproxy_requests_total{code="499",function="fn",namespace="ns"} 2`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestStreaming sends bodies far larger than any buffer both ways, and
// checks that a response still streaming holds its slot until it ends, or
// until its client hangs up.
func TestStreaming(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency, c.MaxBodyBytes = 1, 64<<20 })
	t.Run("request body", func(t *testing.T) {
		const n = 32 << 20
		body := make([]byte, n)
		var sum int64
		for i := range body {
			body[i] = byte(i * 7)
			sum += int64(body[i])
		}
		for _, chunked := range []bool{false, true} {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/count", bytes.NewReader(body))
			if chunked {
				req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), -1
			}
			resp, got := h.do(req)
			if want := fmt.Sprintf("%d %d", n, sum); resp.StatusCode != 200 || string(got) != want {
				t.Errorf("chunked=%v: %d %q, want 200 %q", chunked, resp.StatusCode, got, want)
			}
		}
	})
	t.Run("response holds the slot", func(t *testing.T) {
		resp, err := h.client.Get(h.url + "/drip?id=s1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadFull(resp.Body, make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
		if h.srv.inFlight() != 1 {
			t.Errorf("in flight while the body streams = %d, want 1", h.srv.inFlight())
		}
		h.get("http://"+h.fn.Addr(), "/release?id=s1")
		rest, err := io.ReadAll(resp.Body)
		if err != nil || len(rest) != 100<<10 {
			t.Fatalf("rest of the body: %d bytes, %v", len(rest), err)
		}
		eventually.True(h.t, "slot released after the body", func() bool { return h.srv.inFlight() == 0 })
	})
	t.Run("client hangs up mid-body", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("GET /drip?id=s2 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, make([]byte, 50<<10)); err != nil {
			t.Fatal(err)
		}
		before := h.counter("sless_queueproxy_requests_total", "code", "499")
		conn.Close()
		eventually.True(h.t, "slot released after the hang-up", func() bool { return h.srv.inFlight() == 0 })
		// Its head said 200; the answer was cut, and counts as the client's leaving.
		if n := h.counter("sless_queueproxy_requests_total", "code", "499"); n != before+1 {
			t.Errorf("requests_total{code=499} = %v after a hang-up mid-body, want %v", n, before+1)
		}
		if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != 200 {
			t.Errorf("next request: %d, want 200", resp.StatusCode)
		}
	})
}
