package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/runtimes"
)

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	os.Exit(m.Run())
}

// recorder keeps every report of ready instances, in order.
type recorder struct {
	mu      sync.Mutex
	reports [][]Endpoint
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) record(_, _ string, ready []Endpoint) {
	r.mu.Lock()
	r.reports = append(r.reports, slices.Clone(ready))
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) last() []Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return nil
	}
	return r.reports[len(r.reports)-1]
}

// waitReady waits until n instances are reported ready and returns them.
func (r *recorder) waitReady(t *testing.T, n int) []Endpoint {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if last := r.last(); len(last) == n {
			return last
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("ready instances = %d, want %d", len(r.last()), n)
		}
	}
}

func testFunction() Workload {
	path, args, env := testfn.Command()
	return Workload{Namespace: "test", Name: "fn", Process: runtimes.Process{Path: path, Args: args, Env: env},
		Timeout: 10 * time.Second, MaxBodyBytes: 1 << 20}
}

func start(t *testing.T) (*Supervisor, *recorder) {
	t.Helper()
	rec := newRecorder()
	s := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Changed: rec.record, StopTimeout: 5 * time.Second})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return s, rec
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func status(t *testing.T, s *Supervisor) Status {
	t.Helper()
	st, ok := s.Status("test", "fn")
	if !ok {
		t.Fatal("function unknown to the supervisor")
	}
	return st
}

func TestScaleUpAndDown(t *testing.T) {
	s, rec := start(t)
	s.Set(testFunction())
	if had, err := s.Scale(context.Background(), "test", "fn", 2); err != nil || had != 0 {
		t.Fatalf("Scale = %d, %v; want 0, nil", had, err)
	}
	eps := rec.waitReady(t, 2)
	for _, ep := range eps {
		if code, body := get(t, "http://"+ep.Addr+"/echo"); code != 200 {
			t.Errorf("instance %s: %d %s", ep.Addr, code, body)
		}
		if code, _ := get(t, "http://"+ep.Admin+"/readyz"); code != 200 {
			t.Errorf("instance admin %s: /readyz %d", ep.Admin, code)
		}
	}
	if st := status(t, s); st.Ready != 2 || st.Desired != 2 || st.LastStartup <= 0 {
		t.Errorf("status %+v, want 2 ready of 2 and the startup time", st)
	}
	if had, err := s.Scale(context.Background(), "test", "fn", 0); err != nil || had != 2 {
		t.Fatalf("Scale = %d, %v; want 2, nil", had, err)
	}
	rec.waitReady(t, 0)
	eventually.True(t, "instances stopped", func() bool { st := status(t, s); return st.Stopping+st.Starting+st.Ready == 0 })
	for _, ep := range eps {
		if _, err := http.Get("http://" + ep.Addr + "/echo"); err == nil {
			t.Errorf("instance %s still serves after scaling to zero", ep.Addr)
		}
	}
}

func TestCrashRestarts(t *testing.T) {
	s, rec := start(t)
	s.Set(testFunction())
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	first := rec.waitReady(t, 1)[0]
	_, _ = http.Get("http://" + first.Addr + "/exit")
	eventually.True(t, "a new instance", func() bool {
		last := rec.last()
		return len(last) == 1 && last[0] != first
	})
	st := status(t, s)
	if st.Crashes != 1 || !strings.Contains(st.LastError, "exit status 3") {
		t.Errorf("status %+v, want 1 crash with exit status 3", st)
	}
}

// A crash stays counted when the function is scaled down between the
// process's death and the end of its instance, as the autoscaler does
// when the ready count drops with no load.
func TestCrashWhileScaledDown(t *testing.T) {
	rec := newRecorder()
	var s *Supervisor
	scaled := make(chan struct{})
	var once sync.Once
	s = New(Options{Log: slog.New(slog.DiscardHandler), StopTimeout: 5 * time.Second,
		Changed: func(ns, name string, ready []Endpoint) {
			rec.record(ns, name, ready)
			if len(ready) == 0 && len(rec.reports) > 1 {
				once.Do(func() {
					go func() { _, _ = s.Scale(context.Background(), ns, name, 0); close(scaled) }()
				})
			}
		}})
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	s.Set(testFunction())
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	first := rec.waitReady(t, 1)[0]
	_, _ = http.Get("http://" + first.Addr + "/exit")
	<-scaled
	eventually.True(t, "the instance gone", func() bool { st := status(t, s); return len(st.Instances) == 0 })
	if st := status(t, s); st.Crashes != 1 || !strings.Contains(st.LastError, "exit status 3") {
		t.Errorf("status %+v, want the crash counted with its exit status", st)
	}
}

func TestStartFailureBacksOff(t *testing.T) {
	s, _ := start(t)
	fn := testFunction()
	fn.Process.Path = "/nonexistent/runtime"
	s.Set(fn)
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	eventually.True(t, "two failed starts", func() bool { return status(t, s).Crashes >= 2 })
	if st := status(t, s); !strings.Contains(st.LastError, "/nonexistent/runtime") {
		t.Errorf("last error %q does not name the runtime", st.LastError)
	}
	s.mu.Lock()
	backoff := time.Until(s.fns[key("test", "fn")].notBefore)
	s.mu.Unlock()
	if backoff <= minBackoff/2 {
		t.Errorf("next start in %s after repeated failures, want a growing backoff", backoff)
	}
}

func TestExitBeforeReady(t *testing.T) {
	s, _ := start(t)
	fn := testFunction()
	fn.Process = runtimes.Process{Path: "/bin/sh", Args: []string{"-c", "echo cannot load handler >&2; exit 2"}}
	s.Set(fn)
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	eventually.True(t, "a crash", func() bool { return status(t, s).Crashes >= 1 })
	st := status(t, s)
	for _, want := range []string{"before it was ready", "exit status 2", "cannot load handler"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("last error %q lacks %q", st.LastError, want)
		}
	}
}

// A changed function replaces its instances with no moment without a
// ready one, and a request in flight on an old instance completes.
func TestRollingReplace(t *testing.T) {
	s, rec := start(t)
	fn := testFunction()
	s.Set(fn)
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	old := rec.waitReady(t, 1)[0]
	inflight := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + old.Addr + "/sleep?ms=300")
		if err != nil {
			inflight <- -1
			return
		}
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	eventually.True(t, "request in flight", func() bool {
		_, body := get(t, "http://"+old.Admin+"/stats")
		return strings.Contains(body, `"inFlight":1`)
	})
	fn.Env = []string{"GENERATION=2"}
	s.Set(fn)
	eventually.True(t, "the new instance alone", func() bool {
		last := rec.last()
		return len(last) == 1 && last[0] != old
	})
	if code := <-inflight; code != 200 {
		t.Errorf("request in flight during the replacement: %d, want 200", code)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, r := range rec.reports[1:] {
		if len(r) == 0 {
			t.Errorf("report %d: no ready instance during the replacement", i+1)
		}
	}
}

func TestRemoveAndShutdown(t *testing.T) {
	s, rec := start(t)
	s.Set(testFunction())
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	rec.waitReady(t, 1)
	s.Remove("test", "fn")
	eventually.True(t, "function forgotten", func() bool { _, ok := s.Status("test", "fn"); return !ok })
	if _, err := s.Scale(context.Background(), "test", "fn", 1); err == nil {
		t.Error("Scale of a removed function succeeded")
	}
}

// A function added back while its removed instances drain starts from
// zero, as a new one does: the autoscaler, which forgot it, scales it.
func TestReAddedStartsFromZero(t *testing.T) {
	s, rec := start(t)
	s.Set(testFunction())
	_, _ = s.Scale(context.Background(), "test", "fn", 2)
	rec.waitReady(t, 2)
	s.Remove("test", "fn")
	s.Set(testFunction())
	if st := status(t, s); st.Desired != 0 || st.Starting != 0 {
		t.Fatalf("status after re-adding %+v, want nothing desired or starting", st)
	}
	eventually.True(t, "old instances stopped", func() bool { st := status(t, s); return st.Stopping+st.Starting+st.Ready == 0 })
	if had, err := s.Scale(context.Background(), "test", "fn", 1); err != nil || had != 0 {
		t.Fatalf("Scale = %d, %v; want 0, nil", had, err)
	}
	rec.waitReady(t, 1)
}

// failures records the supervisor's Failing calls.
type failures struct {
	mu      sync.Mutex
	calls   []string // cause, or "" for recovered; "cause@serving"
	reasons []string
}

func (f *failures) record(_, _, reason, cause string, serving int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s@%d", cause, serving))
	f.reasons = append(f.reasons, reason)
}

func (f *failures) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// A version whose instances crash before ready is failing after
// CrashLoopAfter crashes in a row: its traceback shows once on the
// output (every line reaches Lines), then one warning per retry; a
// working version ends it. Replacing a serving version, it says so.
func TestCrashLoop(t *testing.T) {
	var out syncbuf.Buffer
	var lines atomic.Int64
	fails := &failures{}
	rec := newRecorder()
	s := New(Options{Output: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Changed: rec.record,
		Failing: fails.record, Lines: func(_, _, _, line string) {
			if strings.Contains(line, "Traceback") {
				lines.Add(1)
			}
		}, StopTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	good := testFunction()
	s.Set(good)
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	rec.waitReady(t, 1)
	broken := good
	broken.Process = runtimes.Process{Path: "/bin/sh", Args: []string{"-c", "echo Traceback: SyntaxError >&2; exit 1"}}
	s.Set(broken)
	eventually.True(t, "the new version failing", func() bool { return len(fails.get()) == 1 })
	if got := fails.get()[0]; !strings.Contains(got, "SyntaxError") || !strings.HasSuffix(got, "@1") {
		t.Errorf("Failing(%s), want the cause with the previous version's instance serving", got)
	}
	if st := status(t, s); st.Ready != 1 || !strings.Contains(st.Failing, "exit status 1") || st.FailingReason != v1alpha1.ReasonCrashing {
		t.Errorf("status %+v, want the old instance ready and the new version failing", st)
	}
	eventually.True(t, "a retry after the failing", func() bool { return lines.Load() > CrashLoopAfter })
	if n := strings.Count(out.String(), "Traceback"); n != 1 {
		t.Errorf("the traceback shows %d times on the output, want once:\n%s", n, out.String())
	}
	s.Set(good)
	eventually.True(t, "recovered", func() bool { c := fails.get(); return c[len(c)-1] == "@1" })
	if st := status(t, s); st.Failing != "" {
		t.Errorf("status %+v after a working version, want no failing", st)
	}
}

// An instance whose process runs but never passes its readiness check
// makes its function failing once it has been unready for ReadinessGrace
// (before, it may be loading), with reason ReadinessFailing and a cause
// that says since when, why the last check failed and the process's last
// output; a new version ends it.
func TestReadinessFailing(t *testing.T) {
	fails := &failures{}
	rec := newRecorder()
	const grace = 500 * time.Millisecond
	s := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Changed: rec.record, Failing: fails.record,
		ReadinessGrace: grace, StopTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	stuck := testFunction()
	// It prints only after the grace: the cause told is kept current.
	stuck.Process = runtimes.Process{Path: "/bin/sh", Args: []string{"-c", "sleep 1; echo loading the model >&2; exec sleep 600"}}
	s.Set(stuck)
	started := time.Now()
	_, _ = s.Scale(context.Background(), "test", "fn", 1)
	eventually.True(t, "the function failing", func() bool { return len(fails.get()) == 1 })
	if waited := time.Since(started); waited < grace {
		t.Errorf("failing after %v, before the grace of %v", waited, grace)
	}
	fails.mu.Lock()
	reason := fails.reasons[0]
	fails.mu.Unlock()
	got := fails.get()[0]
	if reason != v1alpha1.ReasonReadinessFailing || !strings.Contains(got, "test/fn#") ||
		!strings.Contains(got, "without passing its readiness check since") || !strings.Contains(got, "GET /healthz: ") ||
		!strings.HasSuffix(got, "@0") {
		t.Errorf("Failing(%s, %s), want ReadinessFailing since when and the last check's error", reason, got)
	}
	eventually.True(t, "the status to show the output printed after the grace", func() bool {
		return strings.Contains(status(t, s).Failing, "loading the model")
	})
	if st := status(t, s); st.Starting != 1 || st.FailingReason != v1alpha1.ReasonReadinessFailing ||
		!strings.Contains(st.Failing, "without passing its readiness check since") || len(fails.get()) != 1 {
		t.Errorf("status %+v, Failing calls %q: want the instance starting and the function failing its readiness, told once", st, fails.get())
	}

	s.Set(testFunction())
	rec.waitReady(t, 1)
	// On a busy machine the new version may itself outlast the short
	// grace before it is ready, and be reported failing for a while: what
	// matters is that its readiness ends the failing.
	if c := fails.get(); !strings.HasPrefix(c[len(c)-1], "@") {
		t.Errorf("Failing calls %q, want the failing ended by the new version", c)
	}
	if st := status(t, s); st.Failing != "" || st.FailingReason != "" {
		t.Errorf("status %+v after a version that is ready, want no failing", st)
	}
}
