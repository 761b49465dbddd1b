package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"sless.dev/sless/internal/browsertest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
)

// consoleToken guards the console under test.
const consoleToken = "console-test-token"

// consoleUser drives the console of a real sless dev in a real Chromium.
type consoleUser struct {
	t   *testing.T
	ctx context.Context
	dev *devProcess
}

func (c *consoleUser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	if err := chromedp.Do(c.ctx, actions...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// within runs actions, failing when they take more than d.
func (c *consoleUser) within(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		c.t.Fatalf("%s within %v: %v", what, d, err)
	}
}

// value runs an action that returns a value.
func value[T any](c *consoleUser, what string, a chromedp.Action[T]) T {
	c.t.Helper()
	v, err := chromedp.Run(c.ctx, a)
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// apiFunctions reads the functions' states from the admin API, as the
// console does; nil while it does not answer.
func (c *consoleUser) apiFunctions() map[string]string {
	req, _ := http.NewRequest(http.MethodGet, c.dev.admin+"/v1/functions", nil)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var list struct {
		Functions []struct{ Name, State string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil
	}
	states := map[string]string{}
	for _, f := range list.Functions {
		states[f.Name] = f.State
	}
	return states
}

// TestConsole serves the samples with an admin token and uses the console
// as a person would: sign in, read the list, watch a request arrive, turn
// a trigger off and on, invoke, read a crash, all by keyboard where asked.
func TestConsole(t *testing.T) {
	needs.Commands(t, "python3", "node", "npm", "go", "curl")
	ctx := browsertest.New(t, 4*time.Minute)
	samples, err := filepath.Abs("../../config/samples/functions")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLESS_ADMIN_TOKEN", consoleToken)
	c := &consoleUser{t: t, ctx: ctx, dev: startDevIn(t, samples, nil)}
	eventually.TrueWithin(t, 3*time.Minute, "every sample built", func() bool {
		states := c.apiFunctions()
		return len(states) > 0 && !slices.Contains(mapValues(states), "building")
	})

	t.Run("login refuses a wrong token", c.login)
	t.Run("the list shows every sample with its state", c.list)
	t.Run("the list works by keyboard", c.keyboard)
	t.Run("a request shows in the invocations", c.invocations)
	t.Run("a run shows in the runs, with its answer", c.runs)
	t.Run("a trigger turns off and on", c.toggleTrigger)
	t.Run("the invoke form answers", c.invoke)
	t.Run("a crash shows its cause", c.crash)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func (c *consoleUser) login(t *testing.T) {
	c.t = t
	c.run("wrong token",
		chromedp.Navigate(c.dev.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	errText := value(c, "login error", chromedp.Text(chromedp.CSS("#login-error")))
	if !strings.Contains(errText, "not the admin token") {
		t.Errorf("login error %q", errText)
	}
	c.checkPage("login")
	browsertest.Screenshot(c.ctx, t, "login")
	c.run("right token",
		chromedp.SendKeys(chromedp.CSS("#token"), consoleToken),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#functions tbody tr")))
}

func (c *consoleUser) list(t *testing.T) {
	c.t = t
	want := c.apiFunctions()
	var shown map[string]string
	eventually.True(t, "the list shows the API's states", func() bool {
		rows := value(c, "read the list", chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll('#functions tbody tr')].map((tr) => ({
			name: tr.dataset.function, state: tr.querySelector('.state').textContent }))`))
		shown = map[string]string{}
		for _, r := range rows {
			shown[strings.TrimPrefix(r["name"], "default/")] = r["state"]
		}
		want = c.apiFunctions()
		return len(shown) == len(want) && mapsEqual(shown, want)
	})
	for name := range want {
		if _, ok := shown[name]; !ok {
			t.Errorf("%s missing from the list", name)
		}
	}
	c.checkPage("functions")
	browsertest.Screenshot(c.ctx, t, "functions")
}

func mapsEqual(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// keyboard filters the list by typing and opens a function with Tab and
// Enter.
func (c *consoleUser) keyboard(t *testing.T) {
	c.t = t
	c.run("filter and tab to the link",
		chromedp.Navigate(c.dev.admin+"/ui/#/"),
		chromedp.WaitVisible(chromedp.CSS("#functions tbody tr")),
		chromedp.Focus(chromedp.CSS("#filter-name")),
		chromedp.KeyEvent("hello-go"),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-function="default/hello-node"]`)),
		chromedp.KeyEvent(kb.Tab))
	focused := value(c, "focus", chromedp.Evaluate[string](`document.activeElement.textContent`))
	if focused != "default/hello-go" {
		t.Fatalf("after the filter, Tab focuses %q, want the link to default/hello-go", focused)
	}
	c.run("open it", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS("#invoke")))
	hash := value(c, "hash", chromedp.Evaluate[string](`location.hash`))
	if hash != "#/fn/default/hello-go" {
		t.Errorf("Enter on the link opened %q", hash)
	}
}

func (c *consoleUser) open(fn string) {
	c.run("open "+fn, chromedp.Navigate(c.dev.admin+"/ui/#/fn/default/"+fn), chromedp.WaitVisible(chromedp.CSS("#invoke")))
}

func (c *consoleUser) invocations(t *testing.T) {
	c.t = t
	c.open("hello-go")
	id := "console-" + time.Now().Format("150405.000000")
	curl := exec.Command("curl", "-sf", "-o", "/dev/null", "-H", "X-Request-Id: "+id, c.dev.invoke+"/fn/default/hello-go?name=curl")
	if out, err := curl.CombinedOutput(); err != nil {
		t.Fatalf("curl: %v %s", err, out)
	}
	c.within(2*time.Second, "the request in the invocation list",
		chromedp.WaitVisible(chromedp.CSS(`#invocations tr[data-request-id="`+id+`"]`)))
	c.run("expand it", chromedp.Click(chromedp.CSS(`#invocations tr[data-request-id="`+id+`"] summary`)))
	fields := value(c, "its fields", chromedp.Text(chromedp.CSS(`#invocations tr[data-request-id="`+id+`"] pre`)))
	if !strings.Contains(fields, `"status": 200`) || !strings.Contains(fields, `"instance"`) {
		t.Errorf("the expanded invocation shows %s", fields)
	}
}

func (c *consoleUser) runs(t *testing.T) {
	c.t = t
	c.open("hello-go")
	id := submit(t, c.dev.invoke+"/fn/default/hello-go?name=a-run")
	row := `#runs tr[data-run="` + string(id) + `"]`
	c.within(30*time.Second, "the run, succeeded, in the runs", chromedp.WaitVisible(chromedp.CSS(row+`[data-state="succeeded"]`)))
	c.run("open its answer", chromedp.Click(chromedp.CSS(row+" summary")))
	c.within(30*time.Second, "its answer", chromedp.WaitVisible(chromedp.CSS(row+" pre")))
	answer := value(c, "its answer", chromedp.Text(chromedp.CSS(row+" pre")))
	if !strings.HasPrefix(answer, "200 application/json") || !strings.Contains(answer, "hello a-run") {
		t.Errorf("the run's answer shows %q", answer)
	}
}

func (c *consoleUser) toggleTrigger(t *testing.T) {
	c.t = t
	c.open("hello-go")
	url := c.dev.invoke + "/fn/default/hello-go"
	c.run("disable http", chromedp.Click(chromedp.CSS(`button[data-trigger="http"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Enable trigger http"]`)))
	if code, body := fetch(t, url, ""); code != http.StatusNotFound || !strings.Contains(body, "disabled") {
		t.Fatalf("disabled: GET = %d %s, want 404 naming the disabled trigger", code, body)
	}
	// Enabled again by keyboard: the button takes focus and Enter.
	c.run("enable http", chromedp.Focus(chromedp.CSS(`button[data-trigger="http"]`)), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Disable trigger http"]`)))
	if code, _ := fetch(t, url, ""); code != http.StatusOK {
		t.Fatalf("enabled again: GET = %d, want 200", code)
	}
}

func (c *consoleUser) invoke(t *testing.T) {
	c.t = t
	c.open("hello-go")
	c.run("invoke",
		chromedp.SetValue(chromedp.CSS("#invoke-path"), "/?name=browser"),
		chromedp.Click(chromedp.CSS(`#invoke button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#invoke-status")))
	status := value(c, "status", chromedp.Text(chromedp.CSS("#invoke-status")))
	body := value(c, "body", chromedp.Text(chromedp.CSS("#invoke-body-out")))
	if status != "200" || !strings.Contains(body, "hello browser") {
		t.Errorf("invoke answered %s %s", status, body)
	}
	c.run("charts drawn", chromedp.WaitVisible(chromedp.CSS("#chart-requests canvas")))
	c.checkPage("function")
	browsertest.Screenshot(c.ctx, t, "function")
}

func (c *consoleUser) crash(t *testing.T) {
	c.t = t
	if code, _ := fetch(t, c.dev.invoke+"/fn/default/stress-crash?crash=1", ""); code != http.StatusBadGateway {
		t.Fatalf("crash=1 answered %d, want 502", code)
	}
	c.open("stress-crash")
	c.run("the last crash", chromedp.WaitVisible(chromedp.CSS(`#problems section[aria-label="Last crash"] pre`)))
	crash := value(c, "the last crash", chromedp.Text(chromedp.CSS(`#problems section[aria-label="Last crash"] pre`)))
	if !strings.Contains(crash, "exit status 1") || !strings.Contains(crash, "exits on request") {
		t.Errorf("last crash %q: want the exit and its last output", crash)
	}
	browsertest.Screenshot(c.ctx, t, "crash")
}

// checkPage fails on a control of the page without a name a screen
// reader could say, and on text a script left unrendered.
func (c *consoleUser) checkPage(page string) {
	c.t.Helper()
	unlabeled := value(c, "labels", chromedp.Evaluate[[]string](browsertest.Unlabeled))
	if len(unlabeled) > 0 {
		c.t.Errorf("%s page: controls without a label: %s", page, strings.Join(unlabeled, "\n"))
	}
	text := value(c, "text", chromedp.Evaluate[string](`document.body.innerText`))
	for _, bad := range []string{"[object ", "undefined", "NaN"} {
		if strings.Contains(text, bad) {
			c.t.Errorf("%s page shows %q:\n%s", page, bad, text)
		}
	}
}

// stuckHandler never finishes loading: its instance runs, never ready.
const stuckHandler = "import time\nprint('loading the model', flush=True)\ntime.sleep(3600)\n\ndef handle(e):\n    return 'never'\n"

// The console shows what keeps functions from serving: a function whose
// instance never becomes ready, with the reason and its output; a
// manifest that stops loading, as a banner on the functions page and as
// the failed update of its function, while the version loaded last
// serves.
func TestConsoleProblems(t *testing.T) {
	requirePython3(t)
	ctx := browsertest.New(t, 3*time.Minute)
	t.Setenv("SLESS_ADMIN_TOKEN", "")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "hi.yaml": devManifest, "stuck/main.py": stuckHandler,
		"stuck.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: stuck}\nspec: {runtime: python, source: ./stuck, scale: {initial: 1}}\n"})
	c := &consoleUser{t: t, ctx: ctx, dev: startDevIn(t, dir, nil, "--readiness-grace", "1s")}
	eventually.TrueWithin(t, 2*time.Minute, "hi ready, stuck crashing", func() bool {
		states := c.apiFunctions()
		return states["hi"] == "ready" && states["stuck"] == "crashing"
	})

	t.Run("a function that never becomes ready shows why", func(t *testing.T) {
		c.t = t
		c.open("stuck")
		c.within(10*time.Second, "the error", chromedp.WaitVisible(chromedp.CSS(`#problems section[aria-label="Error"] pre`)))
		// The page follows the cause each second; the output may come
		// after the error is first shown (Python, on a busy machine).
		var shown string
		if !eventually.Holds(eventually.Within, func() bool {
			shown = value(c, "the error", chromedp.Text(chromedp.CSS(`#problems section[aria-label="Error"] pre`)))
			return strings.HasPrefix(shown, "ReadinessFailing: instance default/stuck#") && strings.Contains(shown, "readiness check since") &&
				strings.Contains(shown, "loading the model")
		}) {
			t.Errorf("error %q, want the reason, since when and the last output", shown)
		}
		browsertest.Screenshot(c.ctx, t, "never-ready")
	})

	t.Run("a manifest that stops loading shows a banner", func(t *testing.T) {
		c.t = t
		c.run("the list, without a banner", chromedp.Navigate(c.dev.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#functions tbody tr")))
		if shown := value(c, "the banner", chromedp.Evaluate[bool](`!document.querySelector('#manifest-errors').hidden`)); shown {
			t.Error("a manifest error banner with every manifest loaded")
		}
		writeFiles(t, dir, map[string]string{"hi.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: hi\n"})
		c.within(30*time.Second, "the banner", chromedp.WaitVisible(chromedp.CSS("#manifest-errors li")))
		banner := value(c, "the banner's text", chromedp.Text(chromedp.CSS("#manifest-errors")))
		if !strings.Contains(banner, "did not load") || !strings.Contains(banner, filepath.Join(dir, "hi.yaml")+": ") {
			t.Errorf("banner %q, want the manifest that did not load", banner)
		}
		c.checkPage("functions with a manifest error")
		browsertest.Screenshot(c.ctx, t, "manifest-error")

		c.open("hi")
		c.within(10*time.Second, "the failed update", chromedp.WaitVisible(chromedp.CSS(`#problems section[aria-label="Update failed"] pre`)))
		update := value(c, "the failed update", chromedp.Text(chromedp.CSS(`#problems section[aria-label="Update failed"] pre`)))
		if !strings.Contains(update, "manifest "+filepath.Join(dir, "hi.yaml")) {
			t.Errorf("update failed %q, want the manifest's error", update)
		}
	})
}
