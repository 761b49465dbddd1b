package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/invocation"
)

// front is a real activator in front of a supervisor's instances, as the
// local platform wires them: the supervisor's Dial is its dialer, and
// every connection it dials is kept to be looked at.
type front struct {
	s   *Supervisor
	reg *prometheus.Registry
	url string // the activator's serving port

	mu    sync.Mutex
	dials []net.Conn
}

func startFront(t *testing.T) *front {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &front{reg: prometheus.NewRegistry()}
	a, err := activator.New(activator.Config{Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
		c, err := f.s.Dial(addr, timeout)
		if err == nil {
			f.mu.Lock()
			f.dials = append(f.dials, c)
			f.mu.Unlock()
		}
		return c, err
	}}, nopPoker{}, invocation.NewRing(100), f.reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFunction(activator.RouteSpec{Namespace: "test", Name: "fn", HTTP: true, Timeout: 10 * time.Second})
	rec := newRecorder()
	f.s = New(Options{Log: quiet, StopTimeout: 5 * time.Second, Changed: func(ns, name string, ready []Endpoint) {
		rec.record(ns, name, ready)
		addrs := make([]string, len(ready))
		for i, ep := range ready {
			addrs[i] = ep.Addr
		}
		a.SetEndpoints(ns, name, addrs)
	}})
	serving, admin := listen(t), listen(t)
	f.url = "http://" + serving.Addr().String() + "/fn/test/fn"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := &activator.Server{Activator: a, DrainTimeout: time.Second, Log: quiet,
		Admin: activator.AdminServer{Activator: a, Registry: f.reg, Records: invocation.NewRing(100), Log: quiet}}
	go func() { done <- srv.Run(ctx, serving, admin) }()
	t.Cleanup(func() {
		cancel()
		<-done
		shutdown, stop := context.WithTimeout(context.Background(), 20*time.Second)
		defer stop()
		if err := f.s.Shutdown(shutdown); err != nil {
			t.Error(err)
		}
	})
	f.s.Set(testFunction())
	if _, err := f.s.Scale(context.Background(), "test", "fn", 1); err != nil {
		t.Fatal(err)
	}
	rec.waitReady(t, 1)
	return f
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type nopPoker struct{}

func (nopPoker) Poke(string, string) {}

// instanceAddr is the one instance's queue-proxy serving address.
func (f *front) instanceAddr(t *testing.T) string {
	t.Helper()
	st, _ := f.s.Status("test", "fn")
	if len(st.Instances) != 1 || st.Instances[0].Addr == "" {
		t.Fatalf("instances = %+v, want one ready", st.Instances)
	}
	return st.Instances[0].Addr
}

// TestActivatorReachesQueueProxyInProcess: in local mode the activator's
// hop to a queue-proxy in the same process is an in-memory connection,
// never a loopback TCP one, and the request arrives as it would over TCP.
func TestActivatorReachesQueueProxyInProcess(t *testing.T) {
	f := startFront(t)
	for i := range 20 {
		code, body := get(t, f.url+"/echo?i="+strconv.Itoa(i))
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		var e testfn.Echo
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatal(err)
		}
		// The client, then the activator, as each hop's peer address.
		if got := e.Headers["X-Forwarded-For"]; len(got) != 1 || got[0] != "127.0.0.1, 127.0.0.1" {
			t.Errorf("X-Forwarded-For = %q, want the two loopback hops", got)
		}
	}
	f.mu.Lock()
	dials := f.dials
	f.mu.Unlock()
	if len(dials) == 0 {
		t.Fatal("the activator dialed no connection")
	}
	for _, c := range dials {
		if _, ok := c.(*net.TCPConn); ok {
			t.Errorf("the activator dialed %s over TCP", c.RemoteAddr())
		}
	}
	// No socket at the queue-proxy's serving port: its kept-alive
	// connections from the activator would show here.
	_, port, _ := net.SplitHostPort(f.instanceAddr(t))
	if n := establishedAt(t, port); n != 0 {
		t.Errorf("%d loopback TCP connections at the queue-proxy's serving port, want none", n)
	}
	// The queue-proxy still serves on TCP, for everything else.
	if code, _ := get(t, "http://"+f.instanceAddr(t)+"/echo"); code != 200 {
		t.Errorf("queue-proxy over TCP: %d", code)
	}
}

// establishedAt counts the established TCP connections with an end at
// port on this machine (Linux; elsewhere the test skips the check).
func establishedAt(t *testing.T, port string) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		return 0
	}
	p, _ := strconv.Atoi(port)
	hex := fmt.Sprintf(":%04X", p)
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			const established = "01"
			if len(fields) > 3 && fields[3] == established &&
				(strings.HasSuffix(fields[1], hex) || strings.HasSuffix(fields[2], hex)) {
				n++
			}
		}
		fh.Close()
	}
	return n
}

// TestClientGoneThroughInProcessHop: a client that hangs up while the
// function works is seen through the in-memory hop as through TCP: both
// hops record 499, the queue-proxy frees its slot, and the function's
// request is cancelled.
func TestClientGoneThroughInProcessHop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the activator watches its clients' hang-ups with epoll, on Linux only")
	}
	f := startFront(t)
	qp := func(name, code string) float64 {
		ms := f.s.Metrics()
		if len(ms) != 1 {
			t.Fatalf("metrics of %d instances, want 1", len(ms))
		}
		return value(t, ms[0].Gatherer, name, code)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(f.url, "/fn/test/fn"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET /fn/test/fn/block?id=gone HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the request at the function", func() bool { return qp("sless_queueproxy_inflight_requests", "") == 1 })
	conn.Close()
	eventually.True(t, "the queue-proxy's slot freed", func() bool { return qp("sless_queueproxy_inflight_requests", "") == 0 })
	eventually.True(t, "499 at the queue-proxy", func() bool { return qp("sless_queueproxy_requests_total", "499") == 1 })
	eventually.True(t, "499 at the activator", func() bool { return value(t, f.reg, "sless_activator_requests_total", "499") == 1 })
	// The function's own count: with /block cancelled, a request it
	// tracks is alone in flight.
	eventually.True(t, "the function's request cancelled", func() bool {
		get(t, f.url+"/max")
		get(t, f.url+"/sleep?ms=0")
		_, peak := get(t, f.url+"/max")
		return peak == "1"
	})
	if code, _ := get(t, f.url+"/echo"); code != 200 {
		t.Errorf("next request: %d, want 200", code)
	}
}

// value is the gauge or counter name in g, of the series with code (any
// series when code is empty).
func value(t *testing.T, g prometheus.Gatherer, name, code string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			match := code == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					match = true
				}
			}
			if match {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
