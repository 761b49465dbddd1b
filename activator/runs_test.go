package activator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/queueproxy/queueproxytest"
	"sless.dev/sless/runs"
)

// runsPolicy attempts a run three times, 10 ms apart.
var runsPolicy = runs.Policy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond,
	MaxAge: time.Hour, Concurrency: 10}

// startRuns serves an activator taking runs into a store in memory, with
// function ns/hello on one instance and ns/idle on none.
func startRuns(t *testing.T) (*Activator, string, runs.Store) {
	t.Helper()
	store := runs.NewMemory()
	a, base := startRunsWith(t, store, RunsConfig{MaxBodyBytes: 1 << 10, Interval: 20 * time.Millisecond})
	return a, base, store
}

// startRunsWith serves an activator taking runs into store, as cfg says,
// with function ns/hello on one instance and ns/idle on none.
func startRunsWith(t *testing.T, store runs.Store, cfg RunsConfig) (*Activator, string) {
	t.Helper()
	a := newActivator(t, Config{}, &countingPoker{})
	a.EnableRuns(store, cfg)
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second, Runs: runsPolicy})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "idle", HTTP: true, Timeout: time.Hour, Runs: runsPolicy})
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Dispatch(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return a, serveActivator(t, a)
}

// call sends a request, its header given as name, value pairs, and
// returns the answer with its body read.
func call(t *testing.T, method, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	return callWith(t, client, method, url, body, header...)
}

// callWith is call by c.
func callWith(t *testing.T, c *http.Client, method, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// submitRun submits a run and returns its id, failing unless it was
// accepted.
func submitRun(t *testing.T, base, path, body string, header ...string) runs.ID {
	t.Helper()
	resp, b := call(t, http.MethodPost, base+path, body, append([]string{"Prefer", "respond-async"}, header...)...)
	var accepted runs.Accepted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &accepted) != nil || accepted.State != runs.Queued ||
		len(accepted.ID) < 26 || resp.Header.Get("Location") != "/runs/"+string(accepted.ID) ||
		accepted.Location != resp.Header.Get("Location") || resp.Header.Get("Preference-Applied") != "respond-async" {
		t.Fatalf("submit %s: %d %v %s", path, resp.StatusCode, resp.Header, b)
	}
	return accepted.ID
}

// awaitRun waits for a run to end, through GET /runs/{id}?wait=.
func awaitRun(t *testing.T, base string, id runs.ID) runs.Run {
	t.Helper()
	var r runs.Run
	eventually.True(t, "run "+string(id)+" ended", func() bool {
		resp, b := call(t, http.MethodGet, base+"/runs/"+string(id)+"?wait=5s", "")
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
			t.Fatalf("run %s: %d %s", id, resp.StatusCode, b)
		}
		return r.State.Ended()
	})
	return r
}

// A run is stored and answered 202 at once; the function gets the
// caller's request with the run's id and attempt, not the caller's
// forgeries of them; the run ends succeeded and its result is the
// function's answer as it gave it.
func TestRunSucceeds(t *testing.T) {
	a, base, _ := startRuns(t)
	id := submitRun(t, base, "/fn/ns/hello/echo?x=1", "payload", "X-Tag", "a", "X-Tag", "b",
		wire.RunIDHeader, "forged", "Idempotency-Key", "k1")
	r := awaitRun(t, base, id)
	if r.State != runs.Succeeded || r.Attempts != 1 || r.Status != 200 || r.Namespace != "ns" || r.Function != "hello" ||
		r.StartedAt == nil || r.CompletedAt == nil || r.Error != "" {
		t.Errorf("run: %+v", r)
	}
	resp, b := call(t, http.MethodGet, base+"/runs/"+string(id)+"/result", "")
	var e testfn.Echo
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil {
		t.Fatalf("result: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if e.Method != http.MethodPost || e.URI != "/echo?x=1" || string(e.Body) != "payload" ||
		!slices.Equal(e.Headers["X-Tag"], []string{"a", "b"}) || !slices.Equal(e.Headers[wire.RunIDHeader], []string{string(id)}) ||
		!slices.Equal(e.Headers[wire.RunAttemptHeader], []string{"1"}) || e.Headers["Prefer"] != nil ||
		!slices.Equal(e.Headers["X-Forwarded-Prefix"], []string{"/fn/ns/hello"}) || len(e.Headers["X-Request-Id"]) != 1 {
		t.Errorf("the function got %+v", e)
	}
	recs, _ := a.sink.(*invocation.Ring).Recent(10)
	if len(recs) != 1 || recs[0].Trigger != "run" || recs[0].Status != 200 {
		t.Errorf("records %+v, want the attempt's, trigger run", recs)
	}
}

// An attempt that fails in a way another may not is attempted again,
// after the backoff; one that fails for good, or the last, ends the run
// failed, its answer kept.
func TestRunAttempts(t *testing.T) {
	a, base, _ := startRuns(t)
	for _, tc := range []struct {
		path     string
		state    runs.State
		attempts int
		status   int
		err      string
	}{
		{"/echo?fail-attempts=1", runs.Succeeded, 2, 200, ""},
		{"/echo?status=404", runs.Failed, 1, 404, "the function answered 404"},
		{"/echo?status=500", runs.Failed, 3, 500, "the function answered 500 (attempt 3 of 3)"},
	} {
		id := submitRun(t, base, "/fn/ns/hello"+tc.path, "")
		r := awaitRun(t, base, id)
		if r.State != tc.state || r.Attempts != tc.attempts || r.Status != tc.status || r.Error != tc.err {
			t.Errorf("%s: %s after %d attempts, status %d, error %q; want %s after %d, %d, %q",
				tc.path, r.State, r.Attempts, r.Status, r.Error, tc.state, tc.attempts, tc.status, tc.err)
		}
		if resp, _ := call(t, http.MethodGet, base+"/runs/"+string(id)+"/result", ""); resp.StatusCode != tc.status {
			t.Errorf("%s: result %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
	}
	m := a.metrics.runs
	count := func(c prometheus.Counter) int { return int(testutil.ToFloat64(c)) }
	eventually.True(t, "the attempts counted: 1 succeeded, 3 retried, 2 failed; the runs: 1 succeeded, 2 failed", func() bool {
		return count(m.attempts.WithLabelValues("ns", "hello", attemptSucceeded)) == 1 &&
			count(m.attempts.WithLabelValues("ns", "hello", attemptRetried)) == 3 &&
			count(m.attempts.WithLabelValues("ns", "hello", attemptFailed)) == 2 &&
			count(m.completed.WithLabelValues("ns", "hello", "succeeded")) == 1 &&
			count(m.completed.WithLabelValues("ns", "hello", "failed")) == 2
	})
	if n := count(m.submitted.WithLabelValues("ns", "hello")); n != 3 {
		t.Errorf("submitted %d runs, want 3", n)
	}
}

// A running attempt of a run cancelled is cut short: its request to the
// instance is aborted, whether the run was cancelled here (DELETE) or in
// the store by another activator. The function's timeout, and its
// instance's, is an hour: only the cut ends these attempts.
func TestRunCancelCutsAttempt(t *testing.T) {
	a, base, store := startRuns(t)
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "long", HTTP: true, Timeout: time.Hour, Runs: runsPolicy})
	instance := queueproxytest.Start(t, func(c *queueproxy.Config) { c.Timeout = time.Hour })
	a.SetEndpoints("ns", "long", []string{instance.Addr})
	attempts := func() int {
		a.runs.mu.Lock()
		defer a.runs.mu.Unlock()
		return len(a.runs.running)
	}
	for _, how := range []string{"DELETE", "the store"} {
		id := submitRun(t, base, "/fn/ns/long/block?id=never", "")
		eventually.True(t, "the run attempted", func() bool {
			r, err := store.Get(context.Background(), id)
			return err == nil && r.State == runs.Running && attempts() == 1
		})
		if how == "DELETE" {
			if resp, b := call(t, http.MethodDelete, base+"/runs/"+string(id), ""); resp.StatusCode != 200 {
				t.Fatalf("cancel: %d %s", resp.StatusCode, b)
			}
		} else if _, _, err := store.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, "the attempt cut short after a cancel by "+how, func() bool { return attempts() == 0 })
		if r, err := store.Get(context.Background(), id); err != nil || r.State != runs.Cancelled || r.Status != 0 {
			t.Errorf("run cancelled by %s: %+v %v, want cancelled without an answer", how, r, err)
		}
	}
}

// A run not ended has no result yet (409); cancelled, it ends, and a
// cancelled run's attempt is not its outcome.
func TestRunCancel(t *testing.T) {
	a, base, store := startRuns(t)
	id := submitRun(t, base, "/fn/ns/idle/", "")
	eventually.True(t, "the run attempted", func() bool {
		r, err := store.Get(context.Background(), id)
		return err == nil && r.State == runs.Running
	})
	if resp, b := call(t, http.MethodGet, base+"/runs/"+string(id)+"/result", ""); resp.StatusCode != http.StatusConflict ||
		!bytes.Contains(b, []byte("the run is running")) {
		t.Errorf("result of a running run: %d %s, want 409 naming its state", resp.StatusCode, b)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pendingCollector{a})
	eventually.True(t, "the metrics say one run of ns/idle running, none queued, none of ns/hello", func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sless_runs_queued Runs queued (waiting for an attempt, or for a retry), as this activator last read the run store.
# TYPE sless_runs_queued gauge
sless_runs_queued{function="hello",namespace="ns"} 0
sless_runs_queued{function="idle",namespace="ns"} 0
# HELP sless_runs_running Runs with an attempt under way, in any activator, as this activator last read the run store.
# TYPE sless_runs_running gauge
sless_runs_running{function="hello",namespace="ns"} 0
sless_runs_running{function="idle",namespace="ns"} 1
`), "sless_runs_queued", "sless_runs_running") == nil
	})
	resp, b := call(t, http.MethodDelete, base+"/runs/"+string(id), "")
	var r runs.Run
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || r.State != runs.Cancelled {
		t.Errorf("cancel: %d %s", resp.StatusCode, b)
	}
	if n := testutil.ToFloat64(a.metrics.runs.completed.WithLabelValues("ns", "idle", "cancelled")); n != 1 {
		t.Errorf("%v runs counted cancelled, want 1", n)
	}
	if resp, b := call(t, http.MethodGet, base+"/runs/"+string(id)+"/result", ""); resp.StatusCode != http.StatusConflict ||
		!bytes.Contains(b, []byte("ended cancelled without an answer")) {
		t.Errorf("result of a cancelled run: %d %s", resp.StatusCode, b)
	}
}

// What cannot be a run is refused with the reason, and nothing is kept,
// over HTTP/1.1 and HTTP/2 alike.
func TestRunRefused(t *testing.T) {
	_, base, store := startRuns(t)
	async := []string{"Prefer", "respond-async"}
	for proto, c := range map[string]*http.Client{"HTTP/1.1": client, "HTTP/2.0": h2cClient} {
		for _, tc := range []struct {
			name, method, path, body string
			header                   []string
			code                     int
			says                     string
		}{
			{"body too large", "POST", "/fn/ns/hello/", strings.Repeat("x", 2<<10), async, 413, "a run's body is at most 1024 bytes"},
			{"unknown function", "POST", "/fn/ns/nobody/", "", async, 404, UnknownFunction},
			{"key too long", "POST", "/fn/ns/hello/", "", append([]string{"Idempotency-Key", strings.Repeat("k", 256)}, async...), 400, "Idempotency-Key"},
			{"unknown run", "GET", "/runs/" + string(runs.NewID()), "", nil, 404, "no such run"},
			{"not a run id", "DELETE", "/runs/%FF", "", nil, 404, "no such run"},
			{"field not text", "POST", "/fn/ns/hello/", "", append([]string{"X-Tag", "caf\xe9"}, async...), 400, "UTF-8"},
			{"no id", "GET", "/runs/", "", nil, 404, "no such route"},
			{"bad wait", "GET", "/runs/" + string(runs.NewID()) + "?wait=soon", "", nil, 400, "wait is a duration"},
			{"bad method", "PUT", "/runs/" + string(runs.NewID()), "", nil, 405, "PUT is not a method of a run"},
		} {
			resp, b := callWith(t, c, tc.method, base+tc.path, tc.body, tc.header...)
			if resp.Proto != proto || resp.StatusCode != tc.code || !bytes.Contains(b, []byte(tc.says)) {
				t.Errorf("%s, %s: %s %d %s, want %d saying %q", proto, tc.name, resp.Proto, resp.StatusCode, b, tc.code, tc.says)
			}
			if tc.code == 405 && resp.Header.Get("Allow") != "GET, DELETE" {
				t.Errorf("%s, %s: Allow %q, want GET, DELETE", proto, tc.name, resp.Header.Get("Allow"))
			}
		}
	}
	if p, _ := store.Pending(context.Background()); len(p) != 0 {
		t.Errorf("runs kept: %+v", p)
	}
}

// The same Idempotency-Key and request answer the first run; the key with
// another request is a conflict.
func TestRunIdempotencyKey(t *testing.T) {
	_, base, _ := startRuns(t)
	first := submitRun(t, base, "/fn/ns/idle/", "one", "Idempotency-Key", "k")
	resp, b := call(t, http.MethodPost, base+"/fn/ns/idle/", "one", "Prefer", "respond-async", "Idempotency-Key", "k")
	var again runs.Accepted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &again) != nil || again.ID != first || again.State == "" {
		t.Errorf("the same key and request: %d %s, want run %s in its state", resp.StatusCode, b, first)
	}
	resp, b = call(t, http.MethodPost, base+"/fn/ns/idle/", "two", "Prefer", "respond-async", "Idempotency-Key", "k")
	if resp.StatusCode != http.StatusUnprocessableEntity || !bytes.Contains(b, []byte("Idempotency-Key was used for another request")) {
		t.Errorf("the key with another body: %d %s, want 422", resp.StatusCode, b)
	}
}

// An activator without a store refuses runs, saying why, and serves the
// same request without the preference as ever.
func TestRunsDisabled(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "hello", []string{startInstance(t)})
	base := serveActivator(t, a)
	if resp, b := call(t, http.MethodPost, base+"/fn/ns/hello/", "", "Prefer", "respond-async"); resp.StatusCode != http.StatusNotImplemented ||
		!bytes.Contains(b, []byte("--database-url")) {
		t.Errorf("a run without a store: %d %s, want 501", resp.StatusCode, b)
	}
	if resp, _ := call(t, http.MethodPost, base+"/fn/ns/hello/", "", "Prefer", "return=minimal"); resp.StatusCode != 200 {
		t.Errorf("another preference: %d, want the function's 200", resp.StatusCode)
	}
}

// A dispatcher that stops gives back the runs whose attempts wait for an
// instance, unattempted, and returns: it does not hold its host's stop
// for their functions' timeouts.
func TestRunGivenBackOnStop(t *testing.T) {
	a := newActivator(t, Config{}, &countingPoker{})
	store := runs.NewMemory()
	a.EnableRuns(store, RunsConfig{Interval: 20 * time.Millisecond})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "idle", HTTP: true, Timeout: time.Hour, Runs: runsPolicy})
	base := serveActivator(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Dispatch(ctx); close(done) }()
	id := submitRun(t, base, "/fn/ns/idle/", "")
	eventually.True(t, "the run attempted", func() bool {
		r, err := store.Get(context.Background(), id)
		return err == nil && r.State == runs.Running
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Dispatch did not return once stopped")
	}
	if r, err := store.Get(context.Background(), id); err != nil || r.State != runs.Queued || r.Attempts != 0 {
		t.Errorf("the run after the dispatcher stopped: %+v %v, want it queued, unattempted", r, err)
	}
}

// Over HTTP/2 (h2c) a run is taken, read, answered and cancelled as over
// HTTP/1.1 (TestRunRefused refuses over both).
func TestRunsOverHTTP2(t *testing.T) {
	_, base, _ := startRuns(t)
	do := func(method, path, body string, header ...string) (*http.Response, []byte) {
		t.Helper()
		resp, b := callWith(t, h2cClient, method, base+path, body, header...)
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s %s answered over %s", method, path, resp.Proto)
		}
		return resp, b
	}
	resp, b := do(http.MethodPost, "/fn/ns/hello/echo?x=1", "payload", "Prefer", "respond-async", "Idempotency-Key", "h2", wire.RunIDHeader, "forged")
	var accepted runs.Accepted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &accepted) != nil || accepted.State != runs.Queued ||
		resp.Header.Get("Location") != "/runs/"+string(accepted.ID) || resp.Header.Get("Preference-Applied") != "respond-async" {
		t.Fatalf("a run over HTTP/2: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	var r runs.Run
	eventually.True(t, "the run ended", func() bool {
		resp, b := do(http.MethodGet, "/runs/"+string(accepted.ID)+"?wait=5s", "")
		return resp.StatusCode == http.StatusOK && json.Unmarshal(b, &r) == nil && r.State.Ended()
	})
	if r.State != runs.Succeeded || r.Attempts != 1 {
		t.Errorf("run: %+v", r)
	}
	resp, b = do(http.MethodGet, "/runs/"+string(accepted.ID)+"/result", "")
	var e testfn.Echo
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil {
		t.Fatalf("result: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if e.Method != http.MethodPost || e.URI != "/echo?x=1" || string(e.Body) != "payload" || e.Headers["Prefer"] != nil ||
		!slices.Equal(e.Headers[wire.RunIDHeader], []string{string(accepted.ID)}) ||
		!slices.Equal(e.Headers["X-Forwarded-Prefix"], []string{"/fn/ns/hello"}) || len(e.Headers["X-Request-Id"]) != 1 {
		t.Errorf("the function got %+v", e)
	}
	if resp, b := do(http.MethodPost, "/fn/ns/hello/echo?x=1", "another", "Prefer", "respond-async", "Idempotency-Key", "h2"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("the key with another body: %d %s, want 422", resp.StatusCode, b)
	}

	idle := submitRun(t, base, "/fn/ns/idle/", "")
	if resp, b := do(http.MethodDelete, "/runs/"+string(idle), ""); resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"state":"cancelled"`)) {
		t.Errorf("DELETE over HTTP/2: %d %s", resp.StatusCode, b)
	}
}

// A run that ends passes its answer to the function its policy names for
// that end, as a run made with the end: a POST of the answer, saying which
// run ended and how. Functions that pass answers round in a circle stop
// once the chain is as long as one may be.
func TestRunChain(t *testing.T) {
	a, base, _ := startRuns(t)
	first, second := runsPolicy, runsPolicy
	first.OnSuccess, first.OnFailure, second.OnSuccess = runs.Target{Function: "second"}, runs.Target{Function: "second"}, runs.Target{Function: "first"}
	instance := startInstance(t)
	for name, p := range map[string]runs.Policy{"first": first, "second": second} {
		a.SetFunction(RouteSpec{Namespace: "ns", Name: name, HTTP: true, Timeout: 10 * time.Second, Runs: p})
		a.SetEndpoints("ns", name, []string{instance})
	}
	id := submitRun(t, base, "/fn/ns/first/echo?status=404", "hello")
	chain := []runs.Run{awaitRun(t, base, id)}
	for r := chain[0]; r.Next != ""; r = chain[len(chain)-1] {
		chain = append(chain, awaitRun(t, base, r.Next))
		if len(chain) > runs.MaxChainDepth+1 {
			t.Fatalf("the chain went on past %d runs: %+v", runs.MaxChainDepth+1, chain)
		}
	}
	for i, r := range chain {
		want := []string{"first", "second"}[i%2]
		if r.Function != want || r.Depth != i || i > 0 && r.Parent != chain[i-1].ID {
			t.Errorf("run %d of the chain: %+v, want one of %s, %d deep, made by %s", i, r, want, i, chain[max(i-1, 0)].ID)
		}
	}
	if len(chain) != runs.MaxChainDepth+1 || chain[0].State != runs.Failed || !strings.Contains(chain[len(chain)-1].Error, "not passed on to") {
		t.Fatalf("the chain: %d runs, the first %s, the last saying %q", len(chain), chain[0].State, chain[len(chain)-1].Error)
	}

	_, answer := call(t, http.MethodGet, base+"/runs/"+string(chain[0].ID)+"/result", "")
	resp, b := call(t, http.MethodGet, base+"/runs/"+string(chain[1].ID)+"/result", "")
	var e testfn.Echo
	if resp.StatusCode != 200 || json.Unmarshal(b, &e) != nil {
		t.Fatalf("the second run's answer: %d %s", resp.StatusCode, b)
	}
	h := e.Headers
	if e.Method != http.MethodPost || e.URI != "/" || !bytes.Equal(e.Body, answer) ||
		!slices.Equal(h[wire.RunParentHeader], []string{string(chain[0].ID)}) || !slices.Equal(h[wire.RunParentStateHeader], []string{"failed"}) ||
		!slices.Equal(h[wire.RunParentStatusHeader], []string{"404"}) || !slices.Equal(h[wire.RunParentErrorHeader], []string{"the function answered 404"}) ||
		!slices.Equal(h["Content-Type"], []string{"application/json"}) {
		t.Errorf("the run made by the first's end got %s %s %v %q, want a POST of its answer %q", e.Method, e.URI, h, e.Body, answer)
	}
	if n := testutil.ToFloat64(a.metrics.runs.submitted.WithLabelValues("ns", "second")); n != float64((runs.MaxChainDepth+1)/2) {
		t.Errorf("%v runs of second counted submitted, want %d", n, (runs.MaxChainDepth+1)/2)
	}
}
