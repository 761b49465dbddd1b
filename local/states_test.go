package local

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/activator/activatortest"
	"sless.dev/sless/adminapi"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/needs"
)

// get answers a request to a function: status, body and Retry-After.
func (p *platform) fetch(name string) (code int, body, retryAfter string) {
	p.t.Helper()
	resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/" + name + "/")
	if err != nil {
		p.t.Fatalf("GET %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
}

// Functions that exist but do not serve yet: a request for one being
// built waits for its build and is served; one whose build failed, or
// whose instances crash before ready, answers 503 at once with the cause;
// 404 stays for names no manifest declares.
func TestNotServingYet(t *testing.T) {
	needs.Commands(t, "python3", "go")
	dir := t.TempDir()
	files := map[string]string{
		"slow/handler.go": "package slow\n\nimport (\n\t\"context\"\n\n\t\"sless.dev/sless/runtimes/go/sless\"\n)\n\nfunc Handle(context.Context, sless.Event) (any, error) { return \"built\", nil }\n",
		"bad/handler.go":  "package bad\n\nfunc Handle( {\n",
		"broken/main.py":  "raise RuntimeError('cannot reach the database')\n",
		"functions.yaml":  fn("slow", "go", "Handle") + fn("bad", "go", "Handle") + fn("broken", "python", "main.handle"),
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name), content)
	}
	p := runPlatform(t, dir, time.Second)
	p.waitFor("slow known", 30*time.Second, func() bool { return p.statusCode("slow") == http.StatusOK })
	if st := p.status("slow"); st.State != "building" {
		t.Logf("slow is %s already: the build was quicker than the test", st.State)
	}
	if code, body, _ := p.fetch("slow"); code != 200 || body != "built" {
		t.Errorf("request during the build: %d %q, want 200 once built", code, body)
	}

	p.waitFor("bad failed", 5*time.Minute, func() bool { return p.status("bad").State == "failed" })
	code, body, retry := p.fetch("bad")
	if code != 503 || retry == "" || !strings.Contains(body, "build failed") || !strings.Contains(body, "handler.go") {
		t.Errorf("request for a failed build: %d %q Retry-After %q, want 503 naming the build error", code, body, retry)
	}

	code, body, retry = p.fetch("broken")
	if code != 503 || retry == "" || !strings.Contains(body, "crashing") || !strings.Contains(body, "cannot reach the database") {
		t.Errorf("request for a crashing function: %d %q Retry-After %q, want 503 with the crash's cause", code, body, retry)
	}
	if st := p.status("broken"); st.State != "crashing" || !strings.Contains(st.Error, "cannot reach the database") {
		t.Errorf("status %+v, want crashing with the cause", st)
	}
	if code, _, _ := p.fetch("nobody"); code != 404 {
		t.Errorf("unknown function: %d, want 404", code)
	}
}

// A new version that crash-loops leaves the old one serving, shows as a
// failed update, and prints its traceback once.
func TestUpdateThatCrashes(t *testing.T) {
	p := startPlatform(t, manifest("upd", "  scale: {initial: 1}\n"))
	p.waitFor("upd ready", 30*time.Second, func() bool { return p.status("upd").State == "ready" })
	write(t, filepath.Join(p.dir, "fn", "main.py"), "def handle(event:\n    return 1\n")
	p.waitFor("the update failed", 30*time.Second, func() bool { return p.status("upd").Update == "failed" })
	st := p.status("upd")
	if st.State != "ready" || !strings.Contains(st.UpdateError, "SyntaxError") {
		t.Errorf("status %+v, want ready with the update's SyntaxError", st)
	}
	if code, _, err := p.invoke("upd", ""); code != 200 {
		t.Errorf("the previous version: %d %v, want 200", code, err)
	}
	p.waitFor("more retries", 30*time.Second, func() bool { return p.status("upd").Crashes > 4 })
	if n := strings.Count(p.out.String(), "| Traceback (most recent call last)"); n != 1 {
		t.Errorf("the traceback is printed %d times, want once", n)
	}
}

func fn(name, runtime, handler string) string {
	return "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: " + name + "}\nspec:\n  runtime: " + runtime +
		"\n  source: ./" + name + "\n  handler: " + handler + "\n---\n"
}

// statusCode is the admin API's answer for one function.
func (p *platform) statusCode(name string) int {
	resp, err := http.Get("http://" + p.AdminAddr() + "/v1/namespaces/default/functions/" + name)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Requests waiting for a function at zero are answered 404, naming it, as
// soon as its manifest is deleted, not at its timeout. Its instance takes
// minutes to load its handler, so they wait.
func TestRemovedFunctionAnswersItsWaiters(t *testing.T) {
	const slowLoad = "import time\ntime.sleep(600)\n\ndef handle(event):\n    return 'loaded'\n"
	p := startPlatformCode(t, slowLoad, manifest("slow", "  timeoutSeconds: 120\n  scale: {initial: 0}\n"))
	p.waitFor("the function loaded", 30*time.Second, func() bool { return p.status("slow").State == "idle" })
	waiters := activatortest.Wait("http://"+p.Addr()+"/fn/default/slow", 3, time.Minute) // under the function's 120 s
	p.waitFor("the requests to wait for the instance", 30*time.Second, func() bool {
		return p.act.Waiting("default", "slow") == 3 && p.status("slow").Starting == 1
	})
	deleted := time.Now()
	if err := os.Remove(filepath.Join(p.dir, "functions.yaml")); err != nil {
		t.Fatal(err)
	}
	waiters.ExpectRemoved(t, "default", "slow", deleted)
}

// functionsList is the admin API's list.
func (p *platform) functionsList() adminapi.List[FunctionStatus] {
	p.t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr() + "/v1/functions")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list adminapi.List[FunctionStatus]
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		p.t.Fatal(err)
	}
	return list
}

// A manifest that stops loading, or that declares a name another manifest
// has, changes nothing that runs, and says so in the admin API: in the
// list's errors, and as a failed update of the functions it concerns.
func TestManifestErrorsShown(t *testing.T) {
	p := startPlatform(t, manifest("one", "  scale: {initial: 1}\n"))
	p.waitFor("one ready", 30*time.Second, func() bool { return p.status("one").State == "ready" })
	file := filepath.Join(p.dir, "functions.yaml")

	write(t, file, "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: one\n") // no longer parses
	p.waitFor("the broken manifest in the list's errors", 30*time.Second, func() bool {
		errs := p.functionsList().Errors
		return len(errs) == 1 && errs[0].File == file && errs[0].Error != ""
	})
	st := p.status("one")
	if st.State != "ready" || st.Update != "failed" || !strings.Contains(st.UpdateError, "manifest "+file+": ") {
		t.Errorf("one: state %s, update %q %q; want ready, its update failed naming the manifest", st.State, st.Update, st.UpdateError)
	}
	if code, _, err := p.invoke("one", ""); code != 200 {
		t.Errorf("the version loaded last: %d %v, want 200", code, err)
	}

	write(t, file, manifest("one", "  scale: {initial: 1}\n"))
	other := filepath.Join(p.dir, "other.yaml")
	write(t, other, manifest("one", "  scale: {initial: 2}\n"))
	p.waitFor("the duplicate in the list's errors", 30*time.Second, func() bool {
		errs := p.functionsList().Errors
		return len(errs) == 1 && errs[0].File == other && errs[0].Function == "default/one" &&
			strings.Contains(errs[0].Error, "already defined in "+file)
	})
	if st := p.status("one"); st.Update != "failed" || !strings.Contains(st.UpdateError, "manifest "+other+": function default/one is already defined") {
		t.Errorf("one: update %q %q, want it failed naming the duplicate", st.Update, st.UpdateError)
	}

	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	p.waitFor("no error once fixed", 30*time.Second, func() bool {
		return len(p.functionsList().Errors) == 0 && p.status("one").Update == ""
	})
}

// A function whose instance runs but never passes its readiness check
// (its handler never finishes loading) shows why once it has been unready
// for the grace: crashing, reason ReadinessFailing, since when, and the
// last lines of its output; a request is answered 503 naming it instead
// of waiting for its timeout.
func TestNeverReady(t *testing.T) {
	stuck := "import time\nprint('loading the model', flush=True)\ntime.sleep(3600)\n\ndef handle(e):\n    return 'never'\n"
	p := startPlatformCode(t, stuck, manifest("stuck", "  scale: {initial: 1}\n"), func(o *Options) { o.ReadinessGrace = time.Second })
	// Its output may come after it is first shown crashing (Python, on a
	// busy machine): the cause follows it.
	p.waitFor("stuck shown failing its readiness, with its output", 30*time.Second, func() bool {
		st := p.status("stuck")
		return st.State == "crashing" && strings.Contains(st.Error, "loading the model")
	})
	st := p.status("stuck")
	if st.Reason != v1alpha1.ReasonReadinessFailing || !strings.Contains(st.Error, "without passing its readiness check since") ||
		!strings.Contains(st.Error, "loading the model") || st.Starting != 1 {
		t.Errorf("status: reason %q, error %q, %d starting; want ReadinessFailing since when, with its output, the instance starting",
			st.Reason, st.Error, st.Starting)
	}
	code, body, retry := p.fetch("stuck")
	if code != 503 || retry == "" || !strings.Contains(body, "not ready") || !strings.Contains(body, "readiness check") {
		t.Errorf("request: %d %q Retry-After %q, want 503 naming the readiness failure", code, body, retry)
	}
}
