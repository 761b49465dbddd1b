package activator

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy/queueproxytest"
)

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	os.Exit(m.Run())
}

type countingPoker struct{ n atomic.Int32 }

func (p *countingPoker) Poke(string, string) { p.n.Add(1) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newActivator returns an activator recording into a ring, with metrics in
// a registry of its own; both are reachable through the test helpers.
func newActivator(t testing.TB, cfg Config, poker Poker) *Activator {
	t.Helper()
	a, err := New(cfg, poker, invocation.NewRing(1000), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// serveActivator runs a on a loopback port, in HTTP/1.1 and h2c,
// watching hang-ups, and returns its base URL.
func serveActivator(t testing.TB, a *Activator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := forward.NewHangups(quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go h.Run(ctx)
	srv := forward.NewServer(a.ServeHTTP, nil, a.cfg.MaxBodyBytes, 0, quiet)
	h2c := forward.NewH2C(http.HandlerFunc(a.ServeHTTP2), forward.MaxHeadBytes, quiet)
	go func() { _ = h2c.Serve() }()
	go func() { _ = srv.Serve(h.Listener(ln, 0, h2c)) }()
	t.Cleanup(func() { _ = srv.Shutdown(); _ = h2c.Close(); cancel(); _ = h.Close() })
	return "http://" + ln.Addr().String()
}

func startInstance(t *testing.T) string { return queueproxytest.Start(t).Addr }

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 600}}

// h2cClient speaks HTTP/2 without TLS, with prior knowledge, as gRPC
// clients and curl --http2-prior-knowledge do.
var h2cClient = func() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}()

func get(t *testing.T, url string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func TestRouting(t *testing.T) {
	a := newActivator(t, Config{Domain: "fn.example.test"}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "cron-only", Timeout: 10 * time.Second})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "off", DisabledHTTP: "web", Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	base := serveActivator(t, a)

	tests := []struct {
		name, path, host string
		wantCode         int
		wantURI          string // as the function sees it, or the 404's error
		wantPrefix       string // X-Forwarded-Prefix as the function sees it
	}{
		{"path", "/fn/ns/hello/echo?x=1&y=%2F", "", 200, "/echo?x=1&y=%2F", "/fn/ns/hello"},
		{"path without rest", "/fn/ns/hello", "", 200, "/", "/fn/ns/hello"},
		{"path with query only", "/fn/ns/hello?q=1", "", 200, "/?q=1", "/fn/ns/hello"},
		{"host", "/echo?h=1", "hello.ns.fn.example.test", 200, "/echo?h=1", ""},
		{"host with port", "/echo", "hello.ns.fn.example.test:8080", 200, "/echo", ""},
		{"unknown function", "/fn/ns/nobody/echo", "", 404, "unknown function", ""},
		{"unknown namespace", "/fn/other/hello", "", 404, "unknown function", ""},
		{"no http trigger", "/fn/ns/cron-only/echo", "", 404, "unknown function", ""},
		{"http trigger disabled", "/fn/ns/off/echo", "", 404, "trigger web of ns/off is disabled (enabled: false)", ""},
		{"not a function route", "/echo", "", 404, "unknown function", ""},
		{"other domain", "/echo", "hello.ns.elsewhere.test", 404, "unknown function", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A client's forwarding fields are replaced by the platform's.
			code, body := get(t, base+tt.path, "Host", tt.host, "X-Forwarded-Prefix", "/forged", "X-Forwarded-Host", "forged.test",
				"X-Forwarded-Proto", "https")
			if code != tt.wantCode {
				t.Fatalf("%s: %d %s, want %d", tt.path, code, body, tt.wantCode)
			}
			if code != 200 {
				if !strings.Contains(string(body), `"error":"`+tt.wantURI+`"`) {
					t.Errorf("404 body %s does not say %s", body, tt.wantURI)
				}
				return
			}
			var e testfn.Echo
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("echo %s: %v", body, err)
			}
			if e.URI != tt.wantURI {
				t.Errorf("function saw %q, want %q", e.URI, tt.wantURI)
			}
			host := cmp.Or(tt.host, strings.TrimPrefix(base, "http://"))
			if prefix := e.Headers["X-Forwarded-Prefix"]; (tt.wantPrefix == "" && prefix != nil) || (tt.wantPrefix != "" && !slices.Equal(prefix, []string{tt.wantPrefix})) ||
				e.Headers["X-Forwarded-Host"] != nil || e.Host != host || e.Headers["X-Forwarded-Proto"] != nil {
				t.Errorf("function saw X-Forwarded-Prefix %q, -Host %q, -Proto %q, Host %q: want %q, none, none, %q", prefix,
					e.Headers["X-Forwarded-Host"], e.Headers["X-Forwarded-Proto"], e.Host, tt.wantPrefix, host)
			}
			if len(e.Headers["X-Request-Id"]) != 1 || e.Headers["X-Request-Id"][0] == "" {
				t.Errorf("function got no X-Request-Id: %v", e.Headers)
			}
		})
	}
	t.Run("request id kept", func(t *testing.T) {
		_, body := get(t, base+"/fn/ns/hello/echo", "X-Request-Id", "mine-1")
		var e testfn.Echo
		_ = json.Unmarshal(body, &e)
		if got := e.Headers["X-Request-Id"]; len(got) != 1 || got[0] != "mine-1" {
			t.Errorf("X-Request-Id = %v, want the client's", got)
		}
	})
}

// TestScaleFromZero sends 500 concurrent requests to a function with no
// instance, starts one after they all wait, and checks every request is
// answered 200 and the autoscaler was poked once.
func TestScaleFromZero(t *testing.T) {
	const requests = 500
	poker := &countingPoker{}
	a := newActivator(t, Config{}, poker)
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "cold", HTTP: true, Timeout: 30 * time.Second})
	base := serveActivator(t, a)

	codes := make(chan int, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			resp, err := client.Get(base + "/fn/ns/cold/echo")
			if err != nil {
				codes <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	eventually.True(t, "every request waiting", func() bool { return a.Buffered()[types.NamespacedName{Namespace: "ns", Name: "cold"}] == requests })
	if n := poker.n.Load(); n != 1 {
		t.Fatalf("%d pokes for one activation, want 1", n)
	}
	a.SetEndpoints("ns", "cold", []string{startInstance(t)})
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Fatalf("a request got %d, want 200", code)
		}
	}
	if poker.n.Load() != 1 {
		t.Errorf("%d pokes, want 1", poker.n.Load())
	}
	records, total := a.sink.(*invocation.Ring).Recent(requests)
	if total != requests {
		t.Fatalf("%d invocation records, want %d", total, requests)
	}
	ids := map[string]bool{}
	for _, r := range records {
		if !r.ColdStart || r.ColdStartWait <= 0 || r.QueueWait != r.ColdStartWait || r.Status != 200 || r.Trigger != "http" ||
			r.Function != "cold" || r.Instance == "" || r.Error != "" {
			t.Fatalf("record %+v, want a 200 cold start of cold over http, with its wait and instance", r)
		}
		ids[r.RequestID] = true
	}
	if len(ids) != requests || ids[""] {
		t.Errorf("%d distinct request ids in %d records, want one each", len(ids), requests)
	}
	if n := testutil.ToFloat64(a.metrics.coldRequests.WithLabelValues("ns", "cold")); n != requests {
		t.Errorf("sless_cold_start_requests_total = %v, want %d", n, requests)
	}
	if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "cold", "200")); n != requests {
		t.Errorf("sless_activator_requests_total{code=200} = %v, want %d", n, requests)
	}
}

func TestBufferFull(t *testing.T) {
	a := newActivator(t, Config{QueueDepth: 2}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "busy", HTTP: true, Timeout: 2 * time.Second})
	base := serveActivator(t, a)
	for range 2 {
		go func() { _, _ = client.Get(base + "/fn/ns/busy/echo") }()
	}
	eventually.True(t, "two requests waiting", func() bool { return a.Buffered()[types.NamespacedName{Namespace: "ns", Name: "busy"}] == 2 })
	resp, err := client.Get(base + "/fn/ns/busy/echo")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "too many requests waiting") || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("third request: %d %s Retry-After %q, want 503 with Retry-After 1", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
}

func TestWaitTimeout(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "slow", HTTP: true, Timeout: time.Second})
	base := serveActivator(t, a)
	code, body := get(t, base+"/fn/ns/slow/echo")
	if code != 504 || !strings.Contains(string(body), "timed out waiting") {
		t.Errorf("request to a function that never starts: %d %s, want 504", code, body)
	}
}

// TestRefusedInstanceIsRetried lists a dead address beside a live one:
// requests sent to the dead one are refused before anything was written
// and go to the live one.
func TestRefusedInstanceIsRetried(t *testing.T) {
	dead := net.JoinHostPort("127.0.0.1", "1") // nothing listens on port 1
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "half", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "half", []string{dead, startInstance(t)})
	base := serveActivator(t, a)
	for range 50 {
		if code, body := get(t, base+"/fn/ns/half/echo"); code != 200 {
			t.Fatalf("got %d %s, want 200 from the live instance", code, body)
		}
	}
}

// TestServer runs the activator's two ports: invocations on one; health,
// metrics and the token-guarded admin API on the other; and drain.
func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	ring := invocation.NewRing(100)
	a, err := New(Config{}, &countingPoker{}, ring, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	a.SetFunction(RouteSpecFor(&v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hello"},
		Spec: v1alpha1.FunctionSpec{TimeoutSeconds: 10, Triggers: []v1alpha1.Trigger{
			{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}},
			{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "@hourly"}},
			{Name: "stopped", Enabled: &off, Cron: &v1alpha1.CronTrigger{Schedule: "@hourly"}},
		}},
	}))
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	srv := &Server{Activator: a, DrainTimeout: 5 * time.Second, Log: quiet,
		Admin: AdminServer{Activator: a, Registry: reg, Records: ring, Token: "s3cret", Log: quiet}}
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	base, adminURL := "http://"+serving.Addr().String(), "http://"+admin.Addr().String()
	eventually.True(t, "the admin port", func() bool { code, _ := get(t, adminURL+"/healthz"); return code == 200 })

	for range 3 {
		if code, body := get(t, base+"/fn/ns/hello/echo"); code != 200 {
			t.Fatalf("invocation: %d %s", code, body)
		}
	}
	if code, _ := get(t, base+"/metrics"); code != 404 {
		t.Errorf("/metrics on the invocation port: %d, want 404 (no admin routes there)", code)
	}
	if code, _ := get(t, adminURL+"/v1/functions"); code != 401 {
		t.Errorf("/v1/functions without the token: %d, want 401", code)
	}
	if code, _ := get(t, adminURL+"/healthz", "X-Big", strings.Repeat("x", adminMaxHeaderBytes+8<<10)); code != 431 {
		t.Errorf("a head over the admin port's %d bytes: %d, want 431", adminMaxHeaderBytes, code)
	}
	checkInvocationRoutes(t, adminURL+"/v1/namespaces/ns/functions/hello/invocations", "Bearer s3cret")
	code, body := get(t, adminURL+"/v1/namespaces/ns/functions/hello/invocations")
	if code != 401 {
		t.Errorf("invocations without the token: %d %s, want 401", code, body)
	}
	code, body = get(t, adminURL+"/v1/functions", "Authorization", "Bearer s3cret")
	if code != 200 || !strings.Contains(string(body), `"name":"hello","http":true`) || !strings.Contains(string(body), `"instances":1`) {
		t.Errorf("/v1/functions: %d %s", code, body)
	}
	_, body = get(t, adminURL+"/metrics")
	if want := `sless_activator_requests_total{code="200",function="hello",namespace="ns"} 3`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	checkFireRoute(t, adminURL, ring)
	if code, _ := get(t, adminURL+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after drain = %v", err)
	}
}

// Once unready, the activator closes each kept-alive connection with its
// next answer (Connection: close), a connection from before the signal as
// a new one, so that its clients move to another activator during the
// propagation delay: none is left for the drain to close under a request.
func TestDrainClosesKeptConnections(t *testing.T) {
	a, err := New(Config{}, &countingPoker{}, invocation.NewRing(10), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	srv := &Server{Activator: a, DrainTimeout: time.Second, PropagationDelay: 10 * time.Second, Log: quiet,
		Admin: AdminServer{Activator: a, Registry: prometheus.NewRegistry(), Log: quiet}}
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	kept := dialRaw(t, serving.Addr().String())
	if closes := kept.get(t); closes {
		t.Fatal("an answer before the signal closes its connection")
	}
	cancel()
	eventually.True(t, "the activator unready", func() bool {
		code, _ := get(t, "http://"+admin.Addr().String()+"/readyz")
		return code == 503
	})
	for _, c := range []*rawConn{kept, dialRaw(t, serving.Addr().String())} {
		if closes := c.get(t); !closes {
			t.Error("an answer while unready keeps its connection open: want Connection: close")
		}
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Errorf("the connection after the answer that closes it: %v, want EOF", err)
		}
	}
}

// rawConn is one kept-alive client connection to the activator.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// get sends a GET of the function on the connection and reads its 200,
// reporting whether the answer closes the connection.
func (c *rawConn) get(t *testing.T) (closes bool) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(eventually.Within))
	if _, err := io.WriteString(c, "GET /fn/ns/hello/echo HTTP/1.1\r\nHost: fn\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %s", resp.Status)
	}
	return resp.Close
}

// checkFireRoute: the scheduler's fire route sends a fire with its time and
// body, recorded as cron, behind the token, for an enabled cron trigger
// only; bad requests change nothing.
func checkFireRoute(t *testing.T, adminURL string, ring *invocation.Ring) {
	t.Helper()
	scheduled := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	fire := func(fn, trigger, when, token, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, adminURL+wire.FirePath("ns", fn, trigger), strings.NewReader(body))
		req.Header.Set(wire.ScheduledTimeHeader, when)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		name, fn, trigger, when, token, body string
		code                                 int
		want                                 string
	}{
		{"fire", "hello", "tick", scheduled, "s3cret", "{}", 200, `{"status":200}`},
		{"no token", "hello", "tick", scheduled, "wrong", "{}", 401, ""},
		{"bad time", "hello", "tick", "yesterday", "s3cret", "{}", 400, "not an RFC 3339 time"},
		{"unknown function", "nobody", "tick", scheduled, "s3cret", "{}", 404, "unknown function"},
		{"unknown trigger", "hello", "nope", scheduled, "s3cret", "{}", 404, "fire nope of ns/hello: the function has no such trigger"},
		{"disabled trigger", "hello", "stopped", scheduled, "s3cret", "{}", 409, "fire stopped of ns/hello: the trigger is disabled"},
		{"not a cron trigger", "hello", "web", scheduled, "s3cret", "{}", 409, "fire web of ns/hello: not a cron trigger"},
		{"body too large", "hello", "tick", scheduled, "s3cret", strings.Repeat("x", 64<<10+1), 413, "at most 65536 bytes"},
	} {
		if code, body := fire(tt.fn, tt.trigger, tt.when, tt.token, tt.body); code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, code, body, tt.code, tt.want)
		}
	}
	page, err := ring.List(context.Background(), invocation.Query{Namespace: "ns", Function: "hello", Trigger: "cron"})
	if err != nil || len(page.Invocations) != 1 || page.Invocations[0].TriggerName != "tick" || page.Invocations[0].Status != 200 {
		t.Errorf("cron records: %+v, %v; want the one fire of tick", page.Invocations, err)
	}
}

// TestInstanceStopsMidLoad stops one of two instances while requests flow:
// those in flight on it finish (it drains), and those that find its port
// closed are refused before anything was written and go to the other. No
// request fails.
func TestInstanceStopsMidLoad(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "pair", HTTP: true, Timeout: 20 * time.Second})
	one, two := queueproxytest.Start(t), queueproxytest.Start(t)
	a.SetEndpoints("ns", "pair", []string{one.Addr, two.Addr})
	base := serveActivator(t, a)

	const workers, each = 16, 60
	codes := make(chan int, workers*each)
	var wg sync.WaitGroup
	var sent atomic.Int32
	for range workers {
		wg.Go(func() {
			for range each {
				resp, err := client.Get(base + "/fn/ns/pair/sleep?ms=2")
				sent.Add(1)
				if err != nil {
					codes <- -1
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}
		})
	}
	eventually.True(t, "a quarter of the load sent", func() bool { return sent.Load() > workers*each/4 })
	one.Stop() // drains, then closes its port; the activator still lists it
	for range 50 {
		code, body := get(t, base+"/fn/ns/pair/echo")
		if code != 200 {
			t.Fatalf("after the stop: %d %s, want 200", code, body)
		}
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Fatalf("a request got %d, want every one 200", code)
		}
	}
	if fns := a.Functions(); fns[0].InFlight != 0 || fns[0].Waiting != 0 {
		t.Errorf("after the load: %d in flight, %d waiting; want 0, 0", fns[0].InFlight, fns[0].Waiting)
	}
}

// A function that cannot start answers 503 at once, with its cause and
// Retry-After, to waiting and new requests; counted as its own 503s.
func TestUnavailableAnswersAtOnce(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "broken", HTTP: true, Timeout: time.Minute})
	base := serveActivator(t, a)
	waiting := make(chan int, 1)
	go func() { code, _ := get(t, base+"/fn/ns/broken/"); waiting <- code }()
	eventually.True(t, "a request waiting", func() bool { return a.Buffered()[types.NamespacedName{Namespace: "ns", Name: "broken"}] == 1 })
	a.SetUnavailable("ns", "broken", "build failed: main.go:3:1: syntax error")
	if code := <-waiting; code != 503 {
		t.Errorf("waiting request: %d, want 503", code)
	}
	resp, err := client.Get(base + "/fn/ns/broken/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "main.go:3:1: syntax error") {
		t.Errorf("new request: %d Retry-After %q %s, want 503 with the cause and Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	a.SetUnavailable("ns", "broken", "")
	a.SetEndpoints("ns", "broken", []string{startInstance(t)})
	if code, body := get(t, base+"/fn/ns/broken/echo"); code != 200 {
		t.Errorf("once it serves: %d %s", code, body)
	}
	records, _ := a.sink.(*invocation.Ring).Recent(2)
	if len(records) != 2 || records[0].BytesIn != 0 {
		t.Errorf("record of a GET %+v, want bytesIn 0", records)
	} else if r := records[1]; r.Status != 503 || !strings.Contains(r.Error, "syntax error") || r.Instance != "" {
		t.Errorf("record of a 503 %+v, want the cause as its error", r)
	}
	if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "broken", "503")); n != 2 {
		t.Errorf("sless_activator_requests_total{code=503} = %v, want 2", n)
	}
}

// checkInvocationRoutes checks the invocation routes of a function that
// was called 3 times, all 200 over http.
func checkInvocationRoutes(t *testing.T, url, auth string) {
	t.Helper()
	var page invocation.Page
	code, body := get(t, url+"?limit=2", "Authorization", auth)
	if err := json.Unmarshal(body, &page); code != 200 || err != nil || len(page.Invocations) != 2 || page.Next == "" {
		t.Fatalf("first page: %d %s, want 2 invocations and a next page", code, body)
	}
	code, body = get(t, url+"?limit=2&before="+page.Next, "Authorization", auth)
	var rest invocation.Page
	if err := json.Unmarshal(body, &rest); code != 200 || err != nil || len(rest.Invocations) != 1 || rest.Next != "" ||
		rest.Invocations[0].ID >= page.Invocations[1].ID {
		t.Errorf("second page: %d %s, want the oldest invocation and no next page", code, body)
	}
	tests := []struct {
		query string
		code  int
		want  string
	}{
		{"?status=200&trigger=http&since=1h", 200, `"status":200`},
		{"?status=500", 200, `"invocations":[]`},
		{"/summary?window=15m", 200, `"total":{"count":3,"errors":0`},
		{"/summary", 200, `"window":"1h"`},
		{"?limit=0", 400, "limit must be"},
		{"?limit=x", 400, "limit must be"},
		{"?before=nope", 400, "bad cursor"},
		{"?since=yesterday", 400, "since must be"},
		{"?status=9000", 400, "status must be"},
		{"?trigger=smoke", 400, "trigger must be"},
		{"/summary?window=-1h", 400, "window must be"},
	}
	for _, tt := range tests {
		code, body := get(t, url+tt.query, "Authorization", auth)
		if code != tt.code || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: %d %s, want %d with %s", tt.query, code, body, tt.code, tt.want)
		}
	}
}

// A WebSocket passes the activator, also from zero (buffered as any
// request until an instance is ready), with the request id the activator
// gave it; it holds its instance's slot while open, and its record is the
// 101 of a connection.
func TestWebSocket(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "ws", HTTP: true, Timeout: 30 * time.Second, Concurrency: 1})
	base := serveActivator(t, a)
	url := "ws" + strings.TrimPrefix(base, "http") + "/fn/ns/ws/ws"
	type dialed struct {
		conn *websocket.Conn
		resp *http.Response
		err  error
	}
	opened := make(chan dialed, 1)
	go func() {
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		opened <- dialed{conn, resp, err}
	}()
	eventually.True(t, "the handshake waiting", func() bool { return a.Waiting("ns", "ws") == 1 })
	a.SetEndpoints("ns", "ws", []string{startInstance(t)})
	d := <-opened
	if d.err != nil {
		t.Fatalf("dial from zero: %v", d.err)
	}
	defer d.conn.Close()
	if d.resp.Header.Get("Request-Id") == "" {
		t.Errorf("101 head %v: the function saw no X-Request-Id", d.resp.Header)
	}
	testfn.CheckEcho(t, d.conn)
	if _, inFlight := a.routes.get("ns", "ws").throttler.Load(); inFlight != 1 {
		t.Errorf("in flight with a WebSocket open = %d, want 1", inFlight)
	}
	testfn.CloseWebSocket(t, d.conn)
	eventually.True(t, "the record of the connection", func() bool {
		records, _ := a.sink.(*invocation.Ring).Recent(10)
		return len(records) == 1 && records[0].Status == 101 && records[0].ColdStart && records[0].Error == ""
	})
	if code, body := get(t, base+"/fn/ns/ws/echo", "Connection", "upgrade", "Upgrade", "foo"); code != forward.StatusUpgradeUnsupported {
		t.Errorf("Upgrade: foo: %d %s, want %d", code, body, forward.StatusUpgradeUnsupported)
	}
}
