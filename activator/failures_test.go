package activator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/badclient"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/queueproxy/queueproxytest"
)

// runServer runs a on an activator Server (its read-error answers, its
// timeouts) with the given client read timeout, and returns the serving
// address.
func runServer(t *testing.T, a *Activator, readTimeout time.Duration) string {
	t.Helper()
	srv := &Server{Activator: a, DrainTimeout: time.Second, ReadTimeout: readTimeout, Log: quiet,
		Admin: AdminServer{Activator: a, Registry: prometheus.NewRegistry(), Records: invocation.NewRing(10), Log: quiet}}
	serving, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return serving.Addr().String()
}

// TestClientFaults sends what misbehaving clients send: each gets its 4xx
// (or is served, for HTTP/1.0 without a Host), and none is counted or
// recorded as the function's 502.
func TestClientFaults(t *testing.T) {
	const maxBody = 64 << 10
	a := newActivator(t, Config{MaxBodyBytes: maxBody}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "fn", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "fn", []string{startInstance(t)})
	addr := runServer(t, a, 300*time.Millisecond)
	for _, c := range badclient.Cases("/fn/ns/fn/echo", maxBody) {
		t.Run(c.Name, func(t *testing.T) {
			if got := badclient.Send(t, addr, c, 5*time.Second); got != c.Want {
				t.Errorf("answered %d, want %d", got, c.Want)
			}
		})
	}
	for _, code := range []string{"400", "413", "408"} {
		if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "fn", code)); n == 0 {
			t.Errorf("sless_activator_requests_total{code=%q} = 0: the client's fault is not counted as such", code)
		}
	}
	for _, code := range []string{"500", "502", "503", "504"} {
		if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "fn", code)); n != 0 {
			t.Errorf("sless_activator_requests_total{code=%q} = %v, want 0: client faults counted against the function", code, n)
		}
	}
	records, _ := a.sink.(*invocation.Ring).Recent(100)
	for _, r := range records {
		if r.Status >= 500 {
			t.Errorf("invocation record %+v: a client's fault recorded as the function's", r)
		}
	}
}

// TestDialTimeoutKeepsInstance: a request handed an instance just before
// its deadline fails to connect in the time left. That is the request's
// timeout, not the instance refusing: the instance stays in rotation.
// (Counted as a refusal, it left for good, and with it a function of one
// instance: every later request waited for nothing and got 504.)
func TestDialTimeoutKeepsInstance(t *testing.T) {
	var mu sync.Mutex
	timeOut := true
	a := newActivator(t, Config{Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if timeOut {
			timeOut = false
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		return net.DialTimeout("tcp", addr, timeout)
	}}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "one", HTTP: true, Timeout: 2 * time.Second})
	a.SetEndpoints("ns", "one", []string{startInstance(t)})
	base := serveActivator(t, a)
	if code, body := get(t, base+"/fn/ns/one/echo"); code != 504 || !strings.Contains(string(body), "timeout") {
		t.Errorf("request whose dial timed out: %d %s, want 504", code, body)
	}
	if code, body := get(t, base+"/fn/ns/one/echo"); code != 200 {
		t.Errorf("next request: %d %s, want 200 from the instance still in rotation", code, body)
	}
}

// TestRefusedByUserProcess: an instance whose user process died refuses
// through its queue-proxy, which marks the answer unsent; the request goes
// to the other instance, a small body included. A large body, streamed
// to the first instance, cannot be sent again: it gets the 502.
func TestRefusedByUserProcess(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "pair", HTTP: true, Timeout: 10 * time.Second})
	dead, live := queueproxytest.Start(t), queueproxytest.Start(t)
	dead.Function.Kill()
	a.SetEndpoints("ns", "pair", []string{dead.Addr, live.Addr})
	base := serveActivator(t, a)
	for i := range 20 {
		body := strings.Repeat("b", i*100)
		resp, err := client.Post(base+"/fn/ns/pair/echo", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(got), `"contentLength":`) {
			t.Fatalf("POST of %d bytes: %d %s, want 200 from the live instance", len(body), resp.StatusCode, got)
		}
		if resp.Header.Get(forward.UnsentHeader) != "" {
			t.Fatalf("the unsent mark reached the client")
		}
	}
	// Only the dead instance, its bench over: a body too large to hold is
	// consumed by the first try.
	a.SetEndpoints("ns", "pair", []string{dead.Addr})
	resp, err := client.Post(base+"/fn/ns/pair/echo", "text/plain", strings.NewReader(strings.Repeat("b", forward.HoldMax+1)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(got), "connection refused by the function") || resp.Header.Get(forward.UnsentHeader) != "" {
		t.Errorf("streamed body to a dead user process: %d %s %v, want 502, connection refused, no mark", resp.StatusCode, got, resp.Header)
	}
}

// TestConcurrencyChangeKeepsWaiters raises a function's concurrency while
// a request waits for its one busy instance: the waiter takes the new room
// at once instead of timing out on a replaced throttler.
func TestConcurrencyChangeKeepsWaiters(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	fn := RouteSpec{Namespace: "ns", Name: "grow", HTTP: true, Concurrency: 1, Timeout: 20 * time.Second}
	a.SetFunction(fn)
	inst := queueproxytest.Start(t)
	a.SetEndpoints("ns", "grow", []string{inst.Addr})
	base := serveActivator(t, a)
	blocked := make(chan int, 1)
	go func() {
		resp, err := client.Get(base + "/fn/ns/grow/block?id=grow")
		if err != nil {
			blocked <- -1
			return
		}
		resp.Body.Close()
		blocked <- resp.StatusCode
	}()
	eventually.True(t, "the blocked request at the instance", func() bool { return a.Functions()[0].InFlight == 1 })
	waiter := make(chan int, 1)
	go func() {
		code, _ := get(t, base+"/fn/ns/grow/echo")
		waiter <- code
	}()
	eventually.True(t, "the waiter", func() bool { return a.Buffered()[types.NamespacedName{Namespace: "ns", Name: "grow"}] == 1 })
	fn.Concurrency = 2
	a.SetFunction(fn)
	select {
	case code := <-waiter:
		if code != 200 {
			t.Errorf("waiter after the resize: %d, want 200", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter is stranded after the concurrency change")
	}
	if code, _ := get(t, "http://"+inst.Function.Addr()+"/release?id=grow"); code != 200 {
		t.Fatal("cannot release the blocked request")
	}
	if code := <-blocked; code != 200 {
		t.Errorf("blocked request: %d, want 200", code)
	}
}

// TestGoneInstancesLeaveNoConnections: three instances come, serve
// concurrent requests (filling the activator's pools) and go; the
// activator forgets their clients and closes every connection to them.
func TestGoneInstancesLeaveNoConnections(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "churn", HTTP: true, Timeout: 10 * time.Second})
	base := serveActivator(t, a)
	get(t, base+"/fn/ns/nobody") // the test's own client connection, before counting
	before := openFDs(t)
	for range 3 {
		inst := queueproxytest.Start(t)
		a.SetEndpoints("ns", "churn", []string{inst.Addr})
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if code, _ := get(t, base+"/fn/ns/churn/sleep?ms=20"); code != 200 {
					t.Errorf("request: %d", code)
				}
			})
		}
		wg.Wait()
		a.SetEndpoints("ns", "churn", nil)
		inst.Stop()
		inst.Function.Kill()
	}
	client.CloseIdleConnections()
	n := 0
	a.clients.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d clients kept for instances that are gone", n)
	}
	// The test's client keeps up to 20 connections to the activator.
	eventually.True(t, "the connections to gone instances closed", func() bool { return openFDs(t) <= before+2 })
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count file descriptors")
	}
	return len(fds)
}

// TestOutOfSocketsIsNoRefusal: a dial that fails because this process is
// out of file descriptors is answered 503 with Retry-After, and the
// instance stays in rotation.
func TestOutOfSocketsIsNoRefusal(t *testing.T) {
	var mu sync.Mutex
	fail := true
	a := newActivator(t, Config{Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
		}
		return net.DialTimeout("tcp", addr, timeout)
	}}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "fd", HTTP: true, Timeout: 2 * time.Second})
	a.SetEndpoints("ns", "fd", []string{startInstance(t)})
	base := serveActivator(t, a)
	resp, err := client.Get(base + "/fn/ns/fd/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("out of sockets: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := get(t, base+"/fn/ns/fd/echo"); code != 200 {
		t.Errorf("next request: %d, want 200", code)
	}
}

// TestPeersShareAnInstance: two activators in front of one instance of
// concurrency 2 each admit one request at a time, so together they never
// send it more than it takes: its queue-proxy queues nothing, and the
// excess waits in the activators, where a freed slot or a new instance
// takes it. (Each admitted two: the instance got four and queued two,
// where nothing could move them.)
func TestPeersShareAnInstance(t *testing.T) {
	inst := queueproxytest.Start(t, func(c *queueproxy.Config) { c.Concurrency, c.QueueDepth = 2, 10 })
	var acts []*Activator
	var wg sync.WaitGroup
	for self := range 2 {
		a := newActivator(t, Config{}, &countingPoker{})
		a.SetPeers(Peers{N: 2, Self: self})
		a.SetFunction(RouteSpec{Namespace: "ns", Name: "f", HTTP: true, Concurrency: 2, Timeout: 20 * time.Second})
		a.SetEndpoints("ns", "f", []string{inst.Addr})
		acts = append(acts, a)
		base := serveActivator(t, a)
		for range 3 {
			wg.Go(func() {
				if code, _ := get(t, base+"/fn/ns/f/block?id=peers"); code != 200 {
					t.Errorf("blocked request: %d, want 200 once released", code)
				}
			})
		}
	}
	eventually.True(t, "one request at the instance from each activator, two waiting in each", func() bool {
		for _, a := range acts {
			if fs := a.Functions()[0]; fs.InFlight != 1 || fs.Waiting != 2 {
				return false
			}
		}
		return true
	})
	// A request the activator sent may not have reached the queue-proxy
	// yet: wait for both there, then none may be queued.
	var body []byte
	var stats struct{ InFlight, Queued int }
	eventually.True(t, "both requests at the queue-proxy", func() bool {
		_, body = get(t, "http://"+inst.AdminAddr+"/stats")
		return json.Unmarshal(body, &stats) == nil && stats.InFlight+stats.Queued == 2
	})
	if stats.InFlight != 2 || stats.Queued != 0 {
		t.Errorf("queue-proxy stats %s: want 2 in flight and none queued", body)
	}
	if code, _ := get(t, "http://"+inst.Function.Addr()+"/release?id=peers"); code != 200 {
		t.Fatal("cannot release the blocked requests")
	}
	wg.Wait()
}

// TestHeadLimits: the activator bounds a request's head, in fields and in
// bytes, with a 431 in its own JSON, counted as the client's; a head
// within both reaches the function through the queue-proxy, which takes
// it with the fields the activator adds. A body declared over the limit
// gets its 413, in the same JSON, from the head.
func TestHeadLimits(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "fn", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "fn", []string{startInstance(t)})
	addr := runServer(t, a, time.Second)
	// head is a request head of n fields (Host included) and about size
	// bytes.
	head := func(n, size int) string {
		var b strings.Builder
		b.WriteString("GET /fn/ns/fn/echo HTTP/1.1\r\nHost: fn\r\n")
		value := strings.Repeat("v", max((size-b.Len()-2)/(n-1)-len("X-F000: \r\n"), 1))
		for i := range n - 1 {
			fmt.Fprintf(&b, "X-F%03d: %s\r\n", i, value)
		}
		return b.String() + "\r\n"
	}
	for _, tt := range []struct {
		name string
		head string
		code int
		want string // in the answer's body
	}{
		{"as many fields as allowed", head(forward.MaxHeaderFields, 2<<10), 200, `"X-F098"`},
		{"one field too many", head(forward.MaxHeaderFields+1, 2<<10), 431,
			`{"error":"request header has more than 100 fields","function":"fn","namespace":"ns"}`},
		{"150 fields", head(150, 2<<10), 431, `"error":"request header has more than 100 fields"`},
		{"a head at the limit", head(20, forward.MaxHeadBytes-20), 200, `"X-F018"`},
		{"a head over the limit", head(20, forward.MaxHeadBytes+200), 431, `{"error":"request header too large"`},
		{"a body declared over the limit", "POST /fn/ns/fn/echo HTTP/1.1\r\nHost: fn\r\nExpect: 100-continue\r\nContent-Length: " +
			strconv.Itoa(DefaultMaxBodyBytes+1) + "\r\n\r\n", 413, `{"error":"request body too large","function":"fn","namespace":"ns"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body, ct := sendRaw(t, addr, tt.head)
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("%d %.300s, want %d with %s", code, body, tt.code, tt.want)
			}
			if tt.code != 200 && ct != "application/json" {
				t.Errorf("Content-Type %q: want the platform's JSON", ct)
			}
		})
	}
	if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "fn", "431")); n != 2 {
		t.Errorf(`sless_activator_requests_total{code="431"} = %v, want the 2 heads of too many fields`, n)
	}
}

// sendRaw sends a request as is and returns the answer's status, body and
// Content-Type.
func sendRaw(t *testing.T, addr, request string) (int, string, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = conn.Write([]byte(request)) // a hop may answer before it has read it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get("Content-Type")
}

// TestAnswerBeforeBody: an instance that answers before it has read a
// streamed body, and closes the connection, has its answer passed on, and
// the failure is counted where it belongs: the queue-proxy's 413 (its
// limit below the activator's) is the client's, the refusal of a dead user
// process the function's. (The activator's write of the body failed, and
// it answered 400 "malformed request body", blaming the client, or 502
// "broken pipe" for a chunked body.)
func TestAnswerBeforeBody(t *testing.T) {
	const instanceMax = 1 << 20
	a := newActivator(t, Config{MaxBodyBytes: 10 << 20}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "small", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "small", []string{queueproxytest.Start(t, func(c *queueproxy.Config) { c.MaxBodyBytes = instanceMax }).Addr})
	dead := queueproxytest.Start(t)
	dead.Function.Kill()
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "dead", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "dead", []string{dead.Addr})
	addr := strings.TrimPrefix(serveActivator(t, a), "http://")
	body := strings.Repeat("x", 4<<20)
	// post reads the answer while it sends the body, as clients that
	// take an early answer do: the activator closes the connection after
	// it, the rest of the body unread.
	post := func(path string, chunked bool) (int, string) {
		head := "POST " + path + " HTTP/1.1\r\nHost: fn\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		payload := body
		if chunked {
			head = "POST " + path + " HTTP/1.1\r\nHost: fn\r\nTransfer-Encoding: chunked\r\n\r\n"
			payload = strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		go func() { _, _ = conn.Write([]byte(head + payload)) }()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("POST %s: no answer: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		name, path string
		chunked    bool
		code       int
		want       string
	}{
		{"over the instance's limit", "/fn/ns/small/count", false, 413, "request body too large"},
		{"chunked over the instance's limit", "/fn/ns/small/count", true, 413, "request body too large"},
		{"refused by the user process", "/fn/ns/dead/count", false, 502, "connection refused by the function"},
		{"chunked, refused by the user process", "/fn/ns/dead/count", true, 502, "connection refused by the function"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for range 5 {
				if code, b := post(tt.path, tt.chunked); code != tt.code || !strings.Contains(b, tt.want) {
					t.Fatalf("%d %s, want %d %s", code, b, tt.code, tt.want)
				}
			}
		})
	}
	for code, want := range map[string]float64{"400": 0, "413": 10, "502": 0} {
		if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "small", code)); n != want {
			t.Errorf(`sless_activator_requests_total{function="small",code=%q} = %v, want %v`, code, n, want)
		}
	}
	if n := testutil.ToFloat64(a.metrics.requests.WithLabelValues("ns", "dead", "400")); n != 0 {
		t.Errorf(`sless_activator_requests_total{function="dead",code="400"} = %v: the function's failure blamed on the client`, n)
	}
}
