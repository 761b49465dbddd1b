package local

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/activator"
	"sless.dev/sless/internal/badclient"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
)

var soakFor = flag.Duration("soak", 60*time.Second, "how long TestSoak loads the platform")

// sleepers are one function per runtime that sleeps ?s= seconds and
// exits its process on ?crash: the same handler three times.
var sleepers = map[string]map[string]string{
	"python": {"main.py": `import os, time
def handle(event):
    q = event["query"]
    if "crash" in q:
        os._exit(3)
    time.sleep(float(q.get("s", "0")))
    return "ok"
`},
	"node": {"index.js": `exports.handle = async (event) => {
  if ("crash" in event.query) process.exit(3);
  await new Promise((r) => setTimeout(r, 1000 * parseFloat(event.query.s || "0")));
  return "ok";
};
`},
	"go": {"sleeper.go": `package sleeper

import (
	"context"
	"os"
	"strconv"
	"time"

	"sless.dev/sless/runtimes/go/sless"
)

func Handle(ctx context.Context, e sless.Event) (any, error) {
	if _, ok := e.Query["crash"]; ok {
		os.Exit(3)
	}
	s, _ := strconv.ParseFloat(e.Query["s"], 64)
	select {
	case <-time.After(time.Duration(s * float64(time.Second))):
	case <-ctx.Done():
	}
	return "ok", nil
}
`},
}

var handlers = map[string]string{"python": "main.handle", "node": "index.handle", "go": "Handle"}

// startSleepers runs the platform on one sleeper per runtime, each with
// the spec given (indented under spec:), and waits until each serves.
func startSleepers(t *testing.T, spec string) *platform {
	t.Helper()
	needs.Commands(t, "python3", "node", "go")
	dir := t.TempDir()
	var manifests strings.Builder
	for runtime, files := range sleepers {
		src := filepath.Join(dir, runtime)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			write(t, filepath.Join(src, name), content)
		}
		fmt.Fprintf(&manifests, "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: %s}\nspec:\n  runtime: %s\n  source: ./%s\n  handler: %s\n%s---\n",
			runtime, runtime, runtime, handlers[runtime], spec)
	}
	write(t, filepath.Join(dir, "functions.yaml"), manifests.String())
	p := runPlatform(t, dir, time.Second)
	for runtime := range sleepers {
		p.waitFor(runtime+" serving", 5*time.Minute, func() bool { return p.status(runtime).Ready >= 1 })
	}
	return p
}

// get calls a function and returns the status, or -1 for a transport
// error.
func (p *platform) get(c *http.Client, name, query string) int {
	resp, err := c.Get("http://" + p.Addr() + "/fn/default/" + name + "?" + query)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestBurstDoesNotWedge fires bursts past a one-slot function's capacity
// and timeout: the late requests time out (504), and the function must
// serve the next request. (Requests handed the instance at their deadline
// failed to connect in the time left; counted as refusals, they took the
// only instance out of rotation for good, and every later request got 504
// "timed out waiting for an instance" with the instance idle.)
func TestBurstDoesNotWedge(t *testing.T) {
	p := startSleepers(t, "  concurrency: 1\n  timeoutSeconds: 2\n  scale: {min: 1, max: 1}\n")
	const rounds, burst = 6, 12
	var wg sync.WaitGroup
	for runtime := range sleepers {
		wg.Go(func() {
			for round := range rounds {
				codes := make(chan int, burst)
				var b sync.WaitGroup
				for i := range burst {
					b.Go(func() {
						// Starts 150 µs apart: one request is handed the
						// instance with about a dial's time left.
						time.Sleep(time.Duration(i) * 150 * time.Microsecond)
						codes <- p.get(p.client, runtime, "s=0.5")
					})
				}
				b.Wait()
				close(codes)
				ok := 0
				for code := range codes {
					switch code {
					case 200:
						ok++
					case 504:
					default:
						t.Errorf("%s round %d: a burst request got %d, want 200 or 504", runtime, round, code)
					}
				}
				if ok == 0 {
					t.Errorf("%s round %d: no request of the burst succeeded", runtime, round)
				}
				if code := p.get(p.client, runtime, "s=0"); code != 200 {
					t.Errorf("%s round %d: after the burst, %d; want 200 (the function is wedged)", runtime, round, code)
					return
				}
			}
		})
	}
	wg.Wait()
	p.checkIdle(t)
}

// TestSoak loads every runtime with a mix for -soak (60 s in CI): steady
// requests, bursts past capacity, requests past their timeout, clients
// that hang up, misbehaving clients and instance crashes. Afterwards every
// function serves, and the activator and every queue-proxy have nothing
// left in flight or waiting.
func TestSoak(t *testing.T) {
	p := startSleepers(t, "  concurrency: 2\n  timeoutSeconds: 2\n  scale: {min: 1, max: 3, target: 1, window: 6s}\n")
	ctx, stop := context.WithTimeout(context.Background(), *soakFor)
	defer stop()
	var codes sync.Map // status → *atomic.Int64
	count := func(code int) {
		n, _ := codes.LoadOrStore(code, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	impatient := &http.Client{Timeout: 100 * time.Millisecond}
	names := []string{"python", "node", "go"}
	pick := func() string { return names[rand.IntN(len(names))] }
	var wg sync.WaitGroup
	loop := func(every time.Duration, f func()) {
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					f()
				}
			}
		})
	}
	for range 6 { // steady load
		loop(5*time.Millisecond, func() { count(p.get(p.client, pick(), "s=0.01")) })
	}
	loop(3*time.Second, func() { // a burst past capacity
		var b sync.WaitGroup
		for range 40 {
			b.Go(func() { count(p.get(p.client, pick(), "s=0.3")) })
		}
		b.Wait()
	})
	loop(500*time.Millisecond, func() { count(p.get(p.client, pick(), "s=3")) })       // past the timeout
	loop(100*time.Millisecond, func() { _ = p.get(impatient, pick(), "s=0.5") })       // hangs up
	loop(7*time.Second, func() { count(p.get(p.client, pick(), "crash")) })            // kills an instance
	cases := badclient.Cases("/fn/default/python", int(activator.DefaultMaxBodyBytes)) // the platform's limit: startSleepers sets none
	loop(time.Second, func() {                                                         // a misbehaving client
		c := cases[rand.IntN(len(cases))]
		if strings.Contains(c.Name, "never") || strings.Contains(c.Name, "stops") {
			return // 10 s each at the default read timeout
		}
		code, err := badclient.Do(p.Addr(), c, 15*time.Second)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		count(code)
	})
	wg.Wait()

	// 502 is a crashed instance's requests; 408 a misbehaving client's
	// body that never comes in full.
	allowed := map[int]bool{200: true, 400: true, 408: true, 413: true, 431: true, 502: true, 503: true, 504: true}
	codes.Range(func(code, n any) bool {
		t.Logf("status %d: %d", code, n.(*atomic.Int64).Load())
		if !allowed[code.(int)] {
			t.Errorf("%d answers with status %d", n.(*atomic.Int64).Load(), code)
		}
		return true
	})
	// Crashed instances restart with backoff; then everything serves.
	for _, name := range names {
		p.waitFor(name+" serving after the soak", time.Minute, func() bool { return p.get(p.client, name, "s=0") == 200 })
	}
	p.checkIdle(t)
}

// checkIdle waits for the platform to settle, then checks that the
// activator and every queue-proxy have nothing in flight or waiting.
func (p *platform) checkIdle(t *testing.T) {
	t.Helper()
	settled := func() bool {
		for _, fs := range p.act.Functions() {
			if fs.InFlight != 0 || fs.Waiting != 0 {
				return false
			}
		}
		return p.queueProxyLoad() == 0
	}
	if !eventually.Holds(10*time.Second, settled) {
		for _, fs := range p.act.Functions() {
			t.Errorf("activator: %s/%s has %d in flight, %d waiting; want 0, 0", fs.Namespace, fs.Name, fs.InFlight, fs.Waiting)
		}
		t.Errorf("queue-proxies: %v in flight or queued, want 0", p.queueProxyLoad())
	}
}

// queueProxyLoad sums the requests in flight and queued at every
// instance's queue-proxy, read from the platform's /metrics page.
func (p *platform) queueProxyLoad() float64 {
	resp, err := http.Get("http://" + p.AdminAddr() + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		line := sc.Text()
		if strings.HasPrefix(line, "sless_queueproxy_inflight_requests{") || strings.HasPrefix(line, "sless_queueproxy_queued_requests{") {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			sum += v
		}
	}
	return sum
}

// TestRuntimeKilledUnderLoad kills a function's only runtime process under
// 200 requests a second. Requests at the process when it dies fail (502);
// those its queue-proxy then finds refused are marked unsent, wait for
// the replacement and are served: none is answered "connection refused".
func TestRuntimeKilledUnderLoad(t *testing.T) {
	p := startPlatform(t, manifest("one", "  scale: {min: 1, max: 1}\n"))
	p.waitFor("a ready instance", 30*time.Second, func() bool { return p.status("one").Ready == 1 })
	_, first, err := p.invoke("one", "")
	if err != nil {
		t.Fatal(err)
	}
	var refused, okAfter atomic.Int64
	var killed atomic.Bool
	var wg sync.WaitGroup
	tick := time.NewTicker(5 * time.Millisecond)
	for i := range 600 {
		<-tick.C
		if i == 200 {
			if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed.Store(true)
		}
		wg.Go(func() {
			resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/one")
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case strings.Contains(string(body), "connection refused"):
				refused.Add(1)
			case resp.StatusCode == 200 && killed.Load():
				okAfter.Add(1)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	if refused.Load() > 0 {
		t.Errorf("%d requests answered \"connection refused\": nothing reached the function, they should have waited for the restart", refused.Load())
	}
	if okAfter.Load() < 300 {
		t.Errorf("%d requests served after the kill, want most of the 400", okAfter.Load())
	}
	if st := p.status("one"); st.Crashes != 1 {
		t.Errorf("%d crashes counted, want 1", st.Crashes)
	}
}
