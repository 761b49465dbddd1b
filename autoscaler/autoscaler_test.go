package autoscaler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
	"sless.dev/sless/kubewatch"
	"sless.dev/sless/queueproxy/queueproxytest"
)

// TestAutoscalerLoop runs the whole loop on real parts: load held on a
// real instance is scraped from its queue-proxy, decided on, and written to
// a Deployment in a real API server; a poke at zero asks for an instance at
// once; idle, the function goes to zero after window and grace. Time is
// passed to Step, so the test does not wait for the windows.
func TestAutoscalerLoop(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	controlplane.CreateDeployment(t, c, "loop", 1)
	in := queueproxytest.Start(t)

	reg := prometheus.NewRegistry()
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &kubewatch.KubernetesScaler{Client: c},
		reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: "loop", Spec: kpa.Spec{
		Min: 0, Max: 10, Initial: 1, Target: 1, StableWindow: 6 * time.Second, ScaleToZeroGrace: 2 * time.Second}})
	a.SetInstances("default", "loop", []string{in.AdminAddr})

	// Three requests held at the one instance: three instances wanted.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if resp, err := http.Get("http://" + in.Addr + "/block?id=loop"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	step := func(n int) {
		for range n {
			time.Sleep(20 * time.Millisecond) // an interval for /stats to average over
			now = now.Add(time.Second)
			a.Step(ctx, now)
		}
	}
	var n int32
	if !eventually.Holds(eventually.Within, func() bool {
		if n = replicas(t, c, "loop"); n == 3 {
			return true
		}
		step(1)
		return false
	}) {
		t.Fatalf("replicas %d with 3 requests in flight, want 3", n)
	}
	if got := metric(t, reg, "sless_autoscaler_desired_replicas"); got != 3 {
		t.Errorf("sless_autoscaler_desired_replicas = %v, want 3", got)
	}
	release(t, in)
	wg.Wait()

	// Idle: zero once the stable window and the grace have passed.
	step(6 + 2 + 2)
	if got := replicas(t, c, "loop"); got != 0 {
		t.Fatalf("replicas %d after an idle window and grace, want 0", got)
	}
	for name, want := range map[string]float64{"sless_autoscaler_desired_replicas": 0, "sless_autoscaler_max_replicas": 10} {
		if got := metric(t, reg, name); got != want {
			t.Errorf("%s = %v at zero, want %v", name, got, want)
		}
	}

	// At zero, a poke from an activator (over HTTP, as on Kubernetes)
	// asks for an instance at once.
	a.SetInstances("default", "loop", nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	for body, want := range map[string]int{
		`{"namespace":"default","name":"nobody"}`: 404,
		`{"namespace":"default","nme":"loop"}`:    400,
		`{"namespace":"default","name":"loop"}`:   204,
	} {
		resp, err := http.Post(srv.URL+"/v1/poke", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("poke %s: %d, want %d", body, resp.StatusCode, want)
		}
	}
	if got := replicas(t, c, "loop"); got != 1 {
		t.Errorf("replicas %d after a poke at zero, want 1", got)
	}
}

// TestStepDecidesEveryFunction: with more functions than a step has
// workers, every deciding step still decides each function once, on its
// own load.
func TestStepDecidesEveryFunction(t *testing.T) {
	const n = 2500
	w := &recordingWriter{writes: map[string][]int32{}}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	spec := kpa.Spec{Max: 10, Target: 1, StableWindow: 6 * time.Second}
	for i := range n {
		name := fmt.Sprint("function-", i)
		a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: name, Spec: spec})
	}
	for range 3 { // the first and third steps decide
		now = now.Add(time.Second)
		for i := range n { // as the activator reports, every second
			a.SetBuffered(now, "activator-a", "default", fmt.Sprint("function-", i), i%5)
		}
		a.Step(context.Background(), now)
	}
	if len(w.writes) != n {
		t.Fatalf("%d functions written, want %d", len(w.writes), n)
	}
	for i := range n {
		name := fmt.Sprint("function-", i)
		if got, want := w.writes[name], int32(i%5); len(got) != 2 || got[0] != want || got[1] != want {
			t.Fatalf("%s: written %v, want [%d %d] (its buffered requests, at two deciding steps)", name, got, want, want)
		}
	}
}

// recordingWriter records the replicas written for each function.
type recordingWriter struct {
	mu     sync.Mutex
	writes map[string][]int32 // by name
}

func (w *recordingWriter) Scale(_ context.Context, _, name string, replicas int32) (int32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes[name] = append(w.writes[name], replicas)
	return replicas, nil
}

// last is the replicas last written for name, or -1.
func (w *recordingWriter) last(name string) int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.writes[name]; len(ws) > 0 {
		return ws[len(ws)-1]
	}
	return -1
}

// metric returns the value of the one gauge or counter of the named family
// in reg, or the sum of its one histogram.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no single %s in the registry", name)
	return 0
}
func replicas(t *testing.T, c client.Client, name string) int32 {
	t.Helper()
	var dep appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &dep); err != nil {
		t.Fatal(err)
	}
	return *dep.Spec.Replicas
}

func release(t *testing.T, in *queueproxytest.Instance) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(in.Function.Port) + "/release?id=loop")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestPokeDoesNotHoldTheFunctionUp: a poke at zero asks for an instance
// at once, and the function still goes back to zero after window and
// grace when no load follows, with no buffered count ever reported (the
// requests were served within a second of the poke).
func TestPokeDoesNotHoldTheFunctionUp(t *testing.T) {
	w := &recordingWriter{writes: map[string][]int32{}}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: "f", Spec: kpa.Spec{
		Max: 10, Target: 1, StableWindow: 6 * time.Second, ScaleToZeroGrace: time.Second}})
	a.Poke(context.Background(), now, "default", "f", 1)
	if got := w.last("f"); got != 1 {
		t.Fatalf("after a poke at zero: %d replicas, want 1", got)
	}
	for range 6 + 1 + 2 {
		now = now.Add(time.Second)
		a.Step(context.Background(), now)
	}
	if got := w.last("f"); got != 0 {
		t.Errorf("idle for window and grace after a poke: %d replicas, want 0", got)
	}
}

// TestStartupTime: the time from a decision asking for an instance at zero
// to the first ready one is the function's start-up; none before.
func TestStartupTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &recordingWriter{writes: map[string][]int32{}}
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: "f", Spec: kpa.Spec{
			Max: 10, Initial: 0, Target: 1, StableWindow: 6 * time.Second}})
		if _, ok := a.StartupTime("default", "f"); ok {
			t.Fatal("a start-up measured before any start")
		}
		a.Poke(context.Background(), time.Now(), "default", "f", 1)
		time.Sleep(1500 * time.Millisecond)
		a.SetInstances("default", "f", []string{"10.0.0.1:9091"})
		a.SetInstances("default", "f", []string{"10.0.0.1:9091", "10.0.0.2:9091"}) // not a start from zero
		if d, ok := a.StartupTime("default", "f"); !ok || d != 1500*time.Millisecond {
			t.Errorf("StartupTime = %v, %v; want 1.5s", d, ok)
		}
	})
}

// TestColdStartsCountedOnce: requests waiting at two activators for one
// function at zero make one cold start, timed from the first of them to
// the first ready instance; scaling up, and a start nobody waited for (a
// cron pre-warm), are none.
func TestColdStartsCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &recordingWriter{writes: map[string][]int32{}}, reg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: "f", Spec: kpa.Spec{
			Max: 10, Target: 1, StableWindow: 6 * time.Second}})
		a.Poke(t.Context(), time.Now(), "default", "f", 1) // activator a
		time.Sleep(500 * time.Millisecond)
		a.SetBuffered(time.Now(), "b", "default", "f", 3) // activator b
		a.Poke(t.Context(), time.Now(), "default", "f", 1)
		time.Sleep(time.Second)
		a.SetInstances("default", "f", []string{"10.0.0.1:9091"})
		a.SetInstances("default", "f", []string{"10.0.0.1:9091", "10.0.0.2:9091"})
		if n := metric(t, reg, "sless_cold_starts_total"); n != 1 {
			t.Errorf("sless_cold_starts_total = %v after one start two activators waited for, want 1", n)
		}
		if sum := metric(t, reg, "sless_cold_start_duration_seconds"); sum != 1.5 {
			t.Errorf("cold start took %vs, want 1.5 (from the first poke)", sum)
		}
		a.SetInstances("default", "f", nil)
		a.SetFloor("default", "f", 1) // a pre-warm: nobody waits
		time.Sleep(time.Second)
		a.SetInstances("default", "f", []string{"10.0.0.3:9091"})
		if n := metric(t, reg, "sless_cold_starts_total"); n != 1 {
			t.Errorf("sless_cold_starts_total = %v after a pre-warm, want still 1", n)
		}
	})
}

// TestNewFunctionDecidedAtOnce: Run decides on a function as soon as it is
// added, so that its first answer (its initial instances, or what KEDA
// reads) does not wait for the next tick; it is also counted at once.
func TestNewFunctionDecidedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &recordingWriter{writes: map[string][]int32{}}
		reg := prometheus.NewRegistry()
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, reg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go a.Run(ctx)
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: "new", Spec: kpa.Spec{
			Max: 10, Initial: 2, Target: 1, StableWindow: 6 * time.Second}})
		synctest.Wait() // no time passes: no tick
		if got := w.last("new"); got != 2 {
			t.Errorf("replicas written before any tick: %d, want the initial 2", got)
		}
		if got := metric(t, reg, "sless_autoscaler_functions"); got != 1 {
			t.Errorf("sless_autoscaler_functions = %v, want 1", got)
		}
	})
}

// TestBufferedAddsUpAcrossActivators: each activator holds part of a
// function's waiting requests; their counts add up, one's 0 clears only
// its own, and a count not renewed within BufferedTTL (its activator gone)
// expires.
func TestBufferedAddsUpAcrossActivators(t *testing.T) {
	type report struct {
		at        time.Duration
		activator string
		n         int
	}
	tests := []struct {
		name     string
		reports  []report
		decideAt time.Duration
		want     int32 // at 10 requests an instance
	}{
		{"two activators add up", []report{{0, "a", 100}, {0, "b", 100}}, 0, 20},
		{"one's zero clears only its own", []report{{0, "a", 100}, {0, "b", 100}, {0, "b", 0}}, 0, 10},
		{"a report renews", []report{{0, "a", 100}, {2 * time.Second, "a", 100}}, 4 * time.Second, 10},
		{"a report not renewed expires", []report{{0, "a", 100}, {2 * time.Second, "b", 50}}, autoscaler.BufferedTTL, 5},
	}
	t0 := time.Unix(1_700_000_000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &recordingWriter{writes: map[string][]int32{}}
			a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			a.SetFunction(t0, autoscaler.Target{Namespace: "default", Name: "fn", Spec: kpa.Spec{
				Max: 100, Target: 10, StableWindow: 60 * time.Second}})
			for _, r := range tt.reports {
				a.SetBuffered(t0.Add(r.at), r.activator, "default", "fn", r.n)
			}
			a.Poke(t.Context(), t0.Add(tt.decideAt), "default", "fn", 0)
			if got := w.last("fn"); got != tt.want {
				t.Errorf("decided %d, want %d", got, tt.want)
			}
		})
	}
}

// TestScrapesStopKeepsScale: ten instances at a load of 100 (10 each),
// then every scrape fails for 90 s. Without data the function keeps its
// ten, the skipped decisions are counted, and the failures are logged once
// each, not every second. (Averaged as idle, no data took it 10 → 5 → 2 →
// 1 → 0.)
func TestScrapesStopKeepsScale(t *testing.T) {
	var admins []string
	var servers []*httptest.Server
	for range 10 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"averageConcurrency": 10, "requests": 10, "intervalSeconds": 1}`)
		}))
		servers = append(servers, srv)
		admins = append(admins, strings.TrimPrefix(srv.URL, "http://"))
	}
	w := &recordingWriter{writes: map[string][]int32{}}
	reg := prometheus.NewRegistry()
	var logs syncbuf.Buffer
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: "busy", Spec: kpa.Spec{
		Max: 20, Initial: 1, Target: 10, StableWindow: 60 * time.Second, ScaleToZeroGrace: 30 * time.Second}})
	a.SetInstances("default", "busy", admins)
	for range 60 {
		now = now.Add(time.Second)
		a.Step(t.Context(), now)
	}
	if got := w.last("busy"); got != 10 {
		t.Fatalf("at a load of 100: %d, want 10", got)
	}
	for _, srv := range servers {
		srv.Close() // the instances are unreachable from now on
	}
	writes := len(w.writes["busy"])
	for range 90 {
		now = now.Add(time.Second)
		a.Step(t.Context(), now)
	}
	if got := w.writes["busy"][writes:]; slices.ContainsFunc(got, func(r int32) bool { return r != 10 }) {
		t.Errorf("written while no scrape worked: %v, want only 10", got)
	}
	if n := metric(t, reg, "sless_autoscaler_no_data_total"); n < 10 {
		t.Errorf("sless_autoscaler_no_data_total = %v, want the skipped decisions counted", n)
	}
	out := logs.String()
	for _, msg := range []string{"scrape failed", "no load observed for a whole stable window"} {
		if n := strings.Count(out, msg); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", msg, n, out)
		}
	}
}

// gateWriter holds each write until released, and records the writes and
// the most in flight at once.
type gateWriter struct {
	recordingWriter
	gate           chan struct{}
	inFlight, peak int
	mu             sync.Mutex
	started        chan int32
}

func (w *gateWriter) Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error) {
	w.mu.Lock()
	w.inFlight++
	w.peak = max(w.peak, w.inFlight)
	w.mu.Unlock()
	w.started <- replicas
	<-w.gate
	w.mu.Lock()
	w.inFlight--
	w.mu.Unlock()
	return w.recordingWriter.Scale(ctx, namespace, name, replicas)
}

// TestOneWriterPerFunction: a decision made while the function's write is
// in flight does not write beside it: its caller returns at once, and the
// write in flight then writes the latest decision, so it lands last.
func TestOneWriterPerFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &gateWriter{recordingWriter: recordingWriter{writes: map[string][]int32{}},
			gate: make(chan struct{}), started: make(chan int32, 10)}
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: "f", Spec: kpa.Spec{
			Max: 100, Target: 10, StableWindow: 60 * time.Second}})
		a.SetBuffered(now, "a", "default", "f", 50)
		go a.Poke(t.Context(), now, "default", "f", 0) // decides 5 and writes it
		if got := <-w.started; got != 5 {
			t.Fatalf("first write %d, want 5", got)
		}
		a.SetBuffered(now, "a", "default", "f", 80)
		a.Poke(t.Context(), now, "default", "f", 0) // decides 8: returns, the write in flight takes it
		w.gate <- struct{}{}                        // the 5 lands
		if got := <-w.started; got != 8 {
			t.Fatalf("second write %d, want the latest decision, 8", got)
		}
		w.gate <- struct{}{}
		synctest.Wait()
		if got := w.writes["f"]; !slices.Equal(got, []int32{5, 8}) || w.peak != 1 {
			t.Errorf("writes %v with at most %d at once, want [5 8] one at a time", got, w.peak)
		}
	})
}

// stallingProxy relays TCP to an address and, while stalled, passes no
// byte: an API server that stops answering.
type stallingProxy struct {
	addr    string
	mu      sync.Mutex
	stalled bool
	resumed *sync.Cond
}

func newStallingProxy(t *testing.T, target string) *stallingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &stallingProxy{addr: ln.Addr().String()}
	p.resumed = sync.NewCond(&p.mu)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
	return p
}

func (p *stallingProxy) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		p.mu.Lock()
		for p.stalled {
			p.resumed.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallingProxy) stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = on
	p.resumed.Broadcast()
}

// byName sends the writes of one function to a writer of its own.
type byName struct {
	name      string
	own, rest autoscaler.ReplicaWriter
}

func (b byName) Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error) {
	if name == b.name {
		return b.own.Scale(ctx, namespace, name, replicas)
	}
	return b.rest.Scale(ctx, namespace, name, replicas)
}

// TestStalledAPIServer: an API server that stops answering delays only the
// writes it is asked for, each by the write timeout at most: a poke
// returns, steps go on and another function's replicas are written
// meanwhile; once it answers again, the decision lands. (Writes had no
// deadline: one stall held every function's step.)
func TestStalledAPIServer(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	controlplane.CreateDeployment(t, c, "slow", 0)
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newStallingProxy(t, u.Host)
	viaProxy := rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + proxy.addr
	pc, err := client.New(viaProxy, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// One read first: the client discovers the API on first use, with no
	// deadline of the caller's.
	if got := replicas(t, pc, "slow"); got != 0 {
		t.Fatalf("replicas %d, want 0", got)
	}
	fast := &recordingWriter{writes: map[string][]int32{}}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second),
		byName{name: "fast", own: fast, rest: &kubewatch.KubernetesScaler{Client: pc, Timeout: 300 * time.Millisecond}},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec := kpa.Spec{Max: 10, Target: 70, StableWindow: 6 * time.Second}
	for _, name := range []string{"slow", "fast"} {
		a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: name, Spec: spec})
	}
	proxy.stall(true)
	a.SetBuffered(now, "a", "default", "slow", 250)
	returned := make(chan struct{})
	go func() { a.Poke(context.Background(), now, "default", "slow", 0); close(returned) }()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("a poke's write to a stalled API server never returned")
	}
	a.SetBuffered(now, "a", "default", "fast", 140)
	for range 3 { // two deciding steps
		now = now.Add(time.Second)
		a.SetBuffered(now, "a", "default", "slow", 250)
		a.SetBuffered(now, "a", "default", "fast", 140)
		a.Step(context.Background(), now)
	}
	if got := fast.last("fast"); got != 2 {
		t.Errorf("the other function while the API server stalls: %d written, want 2", got)
	}
	proxy.stall(false)
	var n int32
	if !eventually.Holds(eventually.Within, func() bool {
		if n = replicas(t, c, "slow"); n == 4 {
			return true
		}
		now = now.Add(time.Second)
		a.SetBuffered(now, "a", "default", "slow", 250)
		a.Step(context.Background(), now)
		return false
	}) {
		t.Fatalf("after the API server answers again: %d replicas, want 4", n)
	}
}

// TestRemovedWhileScraped: functions removed while the registry is
// gathered, as when a replica hands its share over under Prometheus'
// scrapes, neither wait on each other for good. (Removing a function under
// the autoscaler's lock waited for its series' lock, held by a scrape
// that waited for the autoscaler's lock to count the functions.)
func TestRemovedWhileScraped(t *testing.T) {
	const n = 3000 // more series in a family than a gather's buffer holds
	reg := prometheus.NewRegistry()
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &recordingWriter{writes: map[string][]int32{}}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range n {
		name := fmt.Sprint("function-", i)
		a.SetFunction(now, autoscaler.Target{Namespace: "default", Name: name, Spec: kpa.Spec{Max: 10, Target: 1, StableWindow: 6 * time.Second}})
		a.SetBuffered(now, "activator-a", "default", name, 1)
	}
	a.Step(t.Context(), now.Add(time.Second)) // decides: every function has its series
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 20 {
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		})
		for i := range n {
			a.RemoveFunction("default", fmt.Sprint("function-", i))
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("removing functions and gathering their series wait on each other")
	}
	if got := a.Scaling(time.Now()); len(got) != 0 {
		t.Errorf("%d functions left after every one was removed", len(got))
	}
}
