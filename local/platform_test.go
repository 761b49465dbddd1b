package local

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/syncbuf"
)

// handler is a Python function that reports its process, the most
// requests it ever had in flight, and its generation; ?sleep= holds a
// request, ?crash exits the process.
const handler = `import os, threading, time
lock = threading.Lock()
inflight = 0
peak = 0

def handle(event):
    global inflight, peak
    q = event["query"]
    if "crash" in q:
        os._exit(3)
    with lock:
        inflight += 1
        peak = max(peak, inflight)
    try:
        time.sleep(float(q.get("sleep", "0")))
    finally:
        with lock:
            inflight -= 1
    return {"pid": os.getpid(), "peak": peak, "gen": os.environ.get("GEN", "")}
`

func manifest(name, extra string) string {
	return fmt.Sprintf(`apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: %s}
spec:
  runtime: python
  source: ./fn
%s---
`, name, extra)
}

const (
	zeroFn = "  scale: {initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}\n"
	oneFn  = "  concurrency: 1\n  scale: {initial: 1, max: 3, target: 1, window: 6s}\n"
)

type platform struct {
	*Platform
	t      *testing.T
	dir    string
	out    *syncbuf.Buffer
	client *http.Client
	// cancel begins the platform's drain; stop waits for its end too.
	cancel func()
	stop   func()
}

func requirePython(t *testing.T) {
	t.Helper()
	needs.Commands(t, "python3") // the local platform tests run Python functions
}

func startPlatform(t *testing.T, manifests string) *platform {
	t.Helper()
	return startPlatformWith(t, manifests)
}

// startPlatformWith is startPlatform with options set.
func startPlatformWith(t *testing.T, manifests string, set ...func(*Options)) *platform {
	t.Helper()
	return startPlatformCode(t, handler, manifests, set...)
}

// startPlatformCode is startPlatformWith with code as the functions'
// Python source.
func startPlatformCode(t *testing.T, code, manifests string, set ...func(*Options)) *platform {
	t.Helper()
	requirePython(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "fn"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "fn", "main.py"), code)
	write(t, filepath.Join(dir, "functions.yaml"), manifests)
	return runPlatform(t, dir, 50*time.Millisecond, set...)
}

// runPlatform runs the platform on dir, with a cache of its own, until the
// test ends, checking every poll for changes.
func runPlatform(t *testing.T, dir string, poll time.Duration, set ...func(*Options)) *platform {
	t.Helper()
	out := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(out, nil))
	opts := Options{Dir: dir, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", CacheDir: t.TempDir(),
		Out: out, Log: log, Poll: poll, Drain: 10 * time.Second}
	for _, f := range set {
		f(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("platform output:\n%s", out.String())
		}
	})
	return &platform{Platform: p, t: t, dir: dir, out: out, cancel: cancel, stop: stop,
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 300}}}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

type answer struct {
	PID  int    `json:"pid"`
	Peak int    `json:"peak"`
	Gen  string `json:"gen"`
	// Error is the platform's, when it answered.
	Error string `json:"error"`
}

// invoke calls a function and returns its status code and answer.
func (p *platform) invoke(name, query string) (int, answer, error) {
	resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/" + name + "?" + query)
	if err != nil {
		return 0, answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, answer{}, err
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil && resp.StatusCode == 200 {
		return resp.StatusCode, a, fmt.Errorf("answer %q: %w", body, err)
	}
	return resp.StatusCode, a, nil
}

func (p *platform) status(name string) FunctionStatus {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.AdminAddr()+"/v1/namespaces/default/functions/"+name, nil)
	req.Header.Set("Authorization", "Bearer tok") // withToken's, unused without
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st FunctionStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatal(err)
	}
	return st
}

func (p *platform) waitFor(what string, within time.Duration, cond func() bool) {
	p.t.Helper()
	eventually.TrueWithin(p.t, within, what, cond)
}

// Requests at zero wait for the first instance and all succeed; with no
// traffic the function goes back to zero after its window.
func TestScaleFromZeroAndBack(t *testing.T) {
	p := startPlatform(t, manifest("zero", zeroFn))
	p.waitFor("the function loaded", 30*time.Second, func() bool { return p.status("zero").State == "idle" })

	const n = 200
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := make(chan string, n)
	for range n {
		wg.Go(func() {
			code, _, err := p.invoke("zero", "")
			if code != 200 {
				failed.Add(1)
				errs <- fmt.Sprintf("%d %v", code, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if failed.Load() > 0 {
		t.Fatalf("%d of %d first requests failed, first: %s", failed.Load(), n, <-errs)
	}
	if st := p.status("zero"); st.Ready < 1 {
		t.Errorf("status after the first requests: %+v, want a ready instance", st)
	}
	p.waitFor("scale to zero after the idle window", 30*time.Second, func() bool {
		st := p.status("zero")
		return st.Desired == 0 && st.Ready == 0 && st.Starting == 0
	})
	if code, _, err := p.invoke("zero", ""); code != 200 {
		t.Errorf("request after scaling to zero: %d %v", code, err)
	}
}

// concurrency: 1 is never exceeded at an instance, however many requests
// arrive.
func TestConcurrencyOneHolds(t *testing.T) {
	p := startPlatform(t, manifest("one", oneFn))
	p.waitFor("a ready instance", 30*time.Second, func() bool { return p.status("one").Ready == 1 })
	var wg sync.WaitGroup
	var peak, failed atomic.Int64
	for range 30 {
		wg.Go(func() {
			for range 5 {
				code, a, err := p.invoke("one", "sleep=0.02")
				if code != 200 || err != nil {
					failed.Add(1)
					continue
				}
				if int64(a.Peak) > peak.Load() {
					peak.Store(int64(a.Peak))
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	if peak.Load() != 1 {
		t.Errorf("an instance had %d requests at once, want 1", peak.Load())
	}
	// One /metrics page for every component, the instances labelled.
	resp, err := http.Get("http://" + p.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sless_activator_requests_total{code="200",function="one",namespace="default"}`,
		`sless_autoscaler_desired_replicas{function="one",namespace="default"}`,
		`sless_queueproxy_inflight_requests{function="one",instance="default/one#`,
		`sless_queueproxy_requests_total{code="200",function="one",instance="default/one#`,
		"go_goroutines ",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The process's runtime series once: not again per instance.
	if n := strings.Count(string(page), "\ngo_goroutines "); n != 1 {
		t.Errorf("/metrics has go_goroutines %d times, want once", n)
	}
}

// A crashed process is replaced and counted.
func TestCrashRestart(t *testing.T) {
	p := startPlatform(t, manifest("one", oneFn))
	p.waitFor("a ready instance", 30*time.Second, func() bool { return p.status("one").Ready == 1 })
	if code, _, _ := p.invoke("one", "crash"); code == 200 {
		t.Fatal("crash request answered 200")
	}
	p.waitFor("the crash counted and a new instance", 30*time.Second, func() bool {
		st := p.status("one")
		return st.Crashes == 1 && st.Ready == 1
	})
	if st := p.status("one"); !strings.Contains(st.LastCrash, "exit status 3") {
		t.Errorf("last crash %q, want the exit status", st.LastCrash)
	}
	if code, _, err := p.invoke("one", ""); code != 200 {
		t.Errorf("after the restart: %d %v", code, err)
	}
}

// A bad manifest is reported with its file and field and skipped; the
// other functions are served. A manifest edit under constant load fails
// no request, and a deleted manifest removes its function.
func TestManifestChanges(t *testing.T) {
	p := startPlatform(t, manifest("one", oneFn))
	write(t, filepath.Join(p.dir, "bad.yaml"), manifest("bad", "  concurrency: -1\n"))
	p.waitFor("the bad manifest reported", 30*time.Second, func() bool {
		return strings.Contains(p.out.String(), filepath.Join(p.dir, "bad.yaml")+": ") &&
			strings.Contains(p.out.String(), "spec.concurrency")
	})
	p.waitFor("a ready instance", 30*time.Second, func() bool { return p.status("one").Ready == 1 })

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var gen2 atomic.Bool
	firstErr := make(chan string, 1)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, a, err := p.invoke("one", "sleep=0.01")
				if code != 200 {
					failed.Add(1)
					select {
					case firstErr <- fmt.Sprintf("%d %v", code, err):
					default:
					}
					continue
				}
				ok.Add(1)
				if a.Gen == "2" {
					gen2.Store(true)
				}
			}
		})
	}
	write(t, filepath.Join(p.dir, "functions.yaml"), manifest("one", oneFn+"  env: [{name: GEN, value: \"2\"}]\n"))
	p.waitFor("answers from the new generation", 60*time.Second, gen2.Load)
	stop()
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed during the edit, first: %s", failed.Load(), failed.Load()+ok.Load(), <-firstErr)
	}

	if err := os.Remove(filepath.Join(p.dir, "functions.yaml")); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the function removed", 30*time.Second, func() bool {
		code, _, _ := p.invoke("one", "")
		return code == 404
	})
}

// A crash under load is noticed at once: the dead instance leaves the
// activator's set (no stream of 502s until a timeout), a new one starts,
// and the platform keeps answering, its admin API too.
func TestCrashUnderLoad(t *testing.T) {
	p := startPlatform(t, manifest("one", oneFn))
	p.waitFor("a ready instance", 30*time.Second, func() bool { return p.status("one").Ready == 1 })
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var okAfter atomic.Int64
	var crashed atomic.Bool
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if code, _, _ := p.invoke("one", "sleep=0.005"); code == 200 && crashed.Load() {
					okAfter.Add(1)
				}
			}
		})
	}
	if code, _, _ := p.invoke("one", "crash"); code == 200 {
		t.Fatal("crash request answered 200")
	}
	crashed.Store(true)
	p.waitFor("the crash counted and requests served again", 30*time.Second, func() bool {
		return p.status("one").Crashes >= 1 && okAfter.Load() > 10
	})
	stop()
}

// A function whose dependencies failed to install (as when the registry is
// unreachable; here a package tarball that is not there yet) is prepared
// again with the same source after a wait, and serves once they install.
func TestFailedInstallIsRetried(t *testing.T) {
	needs.Commands(t, "node", "npm")
	dir, dep := t.TempDir(), filepath.Join(t.TempDir(), "dep.tgz")
	if err := os.MkdirAll(filepath.Join(dir, "fn"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "fn", "package.json"),
		fmt.Sprintf(`{"name": "fn", "version": "1.0.0", "dependencies": {"dep": "file:%s"}}`, dep))
	write(t, filepath.Join(dir, "fn", "index.js"), `exports.handle = async () => ({greeting: require("dep").greeting});`)
	write(t, filepath.Join(dir, "functions.yaml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: needs-dep}
spec: {runtime: node, source: ./fn, handler: index.handle}
`)
	p := runPlatform(t, dir, 50*time.Millisecond, func(o *Options) { o.InstallRetry = 100 * time.Millisecond })
	p.waitFor("the install to fail", time.Minute, func() bool { return strings.Contains(p.out.String(), "(retrying in 100ms)") })

	writePackage(t, dep, map[string]string{
		"package.json": `{"name": "dep", "version": "1.0.0", "main": "index.js"}`,
		"index.js":     `exports.greeting = "hi";`,
	})
	p.waitFor("the function to serve", 2*time.Minute, func() bool {
		resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/needs-dep")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(body), `"greeting":"hi"`)
	})
}

// writePackage writes an npm package tarball holding files.
func writePackage(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		hdr := &tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Now()}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		t.Fatal(err)
	}
	// Written aside and renamed, so that npm never reads half a tarball.
	if err := os.WriteFile(path+".tmp", buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
