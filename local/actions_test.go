package local

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/timeline"
)

// admin sends a request to the admin API with the token and decodes its
// JSON answer into out (when not nil); it returns the status code.
func (p *platform) admin(method, path, body string, out any) int {
	p.t.Helper()
	req, err := http.NewRequest(method, "http://"+p.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

func withToken(o *Options) { o.AdminToken = "tok" }

const fnPath = "/v1/namespaces/default/functions/"

// The console's actions through the admin API: a trigger switched off and
// on, scale bounds changed, each as a session override, and the errors of
// bad requests, which change nothing.
func TestActions(t *testing.T) {
	const spec = "  scale: {min: 1, max: 3}\n  triggers:\n    - {name: web, http: {}}\n    - {name: tick, cron: {schedule: \"@hourly\"}}\n"
	p := startPlatformWith(t, manifest("acts", spec), withToken)
	p.waitFor("ready", time.Minute, func() bool { return p.status("acts").State == "ready" })

	var st FunctionStatus
	if code := p.admin("PATCH", fnPath+"acts/triggers/web", `{"enabled": false}`, &st); code != 200 {
		t.Fatalf("disable web: %d", code)
	}
	if st.Triggers[0].State != "disabled" || st.Overrides == nil || st.Overrides.Triggers["web"] != false {
		t.Errorf("after disabling web: triggers %+v, overrides %+v", st.Triggers, st.Overrides)
	}
	if code, a, _ := p.invoke("acts", ""); code != 404 || !strings.Contains(a.Error, "trigger web") {
		t.Errorf("HTTP with web disabled: %d %+v, want 404 naming it", code, a)
	}
	var back FunctionStatus
	if code := p.admin("PATCH", fnPath+"acts/triggers/web", `{"enabled": true}`, &back); code != 200 || back.Overrides != nil {
		t.Fatalf("enable web: %d, overrides %+v: want none left", code, back.Overrides)
	}
	if code, _, err := p.invoke("acts", ""); code != 200 {
		t.Errorf("HTTP with web enabled again: %d %v", code, err)
	}

	var scaled FunctionStatus
	if code := p.admin("PATCH", fnPath+"acts/scale", `{"min": 2}`, &scaled); code != 200 || scaled.Spec.Scale.Min != 2 || *scaled.Overrides.Min != 2 {
		t.Fatalf("min 2: %d, scale %+v", code, scaled.Spec.Scale)
	}
	p.waitFor("two instances", time.Minute, func() bool { return p.status("acts").Ready == 2 })

	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		errContains              string
	}{
		{"unknown trigger", "PATCH", "acts/triggers/nope", `{"enabled": false}`, 404, `no trigger "nope"`},
		{"unknown function", "PATCH", "nope/triggers/web", `{"enabled": false}`, 404, "unknown function default/nope"},
		{"no enabled", "PATCH", "acts/triggers/web", `{}`, 400, `{"enabled": true}`},
		{"not JSON", "PATCH", "acts/triggers/web", `enabled`, 400, "bad JSON body"},
		{"unknown field", "PATCH", "acts/scale", `{"minimum": 1}`, 400, "unknown field"},
		{"min above max", "PATCH", "acts/scale", `{"min": 4}`, 400, "spec.scale.min: Invalid value: 4: must not exceed max (3)"},
		{"max zero", "PATCH", "acts/scale", `{"max": 0}`, 400, "spec.scale.max: Invalid value: 0: must be between 1 and 1000"},
		{"max above the CRD's bound", "PATCH", "acts/scale", `{"max": 100000}`, 400, "spec.scale.max: Invalid value: 100000: must be between 1 and 1000"},
		{"min above the CRD's bound", "PATCH", "acts/scale", `{"min": 1001, "max": 1001}`, 400, "spec.scale.min: Invalid value: 1001: must be between 0 and 1000"},
		{"nothing to scale", "PATCH", "acts/scale", `{}`, 400, "min, max or both"},
		{"a path without a slash", "POST", "acts/invoke", `{"path": "x"}`, 400, "path must start with"},
		{"invoke unknown", "POST", "nope/invoke", `{}`, 404, "unknown function"},
		{"no such route", "GET", "acts/nothing", "", 404, "no such route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e struct{ Error string }
			code := p.admin(tc.method, fnPath+tc.path, tc.body, &e)
			if code != tc.code || !strings.Contains(e.Error, tc.errContains) {
				t.Errorf("%d %q, want %d with %q", code, e.Error, tc.code, tc.errContains)
			}
		})
	}
	if st := p.status("acts"); st.Spec.Scale.Min != 2 || st.Spec.Scale.Max != 3 || !st.Spec.Triggers[0].IsEnabled() {
		t.Errorf("after the refused requests: scale %+v, web enabled %v: want them unchanged", st.Spec.Scale, st.Spec.Triggers[0].IsEnabled())
	}
}

// Invoke, manifest, source and timeline: what the console's function page
// reads.
func TestFunctionPageRoutes(t *testing.T) {
	p := startPlatformWith(t, manifest("page", "  scale: {initial: 1}\n"), withToken)
	p.waitFor("ready", time.Minute, func() bool { return p.status("page").State == "ready" })
	// What the source view must leave out or not show.
	write(t, filepath.Join(p.dir, "fn", "blob.bin"), "\xff\xfe\x00")
	if err := os.Symlink("/etc/passwd", filepath.Join(p.dir, "fn", "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p.dir, "fn", "node_modules", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.dir, "fn", "node_modules", "x", "index.js"), "dependency")

	var res adminapi.InvocationResult
	code := p.admin("POST", fnPath+"page/invoke", `{"method": "POST", "path": "/?sleep=0", "headers": {"X-Test": "1"}, "body": "hi"}`, &res)
	var a answer
	if code != 200 || res.Status != 200 || json.Unmarshal([]byte(res.Body), &a) != nil || a.PID == 0 || res.DurationMs <= 0 {
		t.Fatalf("invoke: %d %+v", code, res)
	}
	if res.Headers["Content-Type"] == "" {
		t.Errorf("invoke headers %v, want the function's", res.Headers)
	}

	var m adminapi.Manifest
	if code := p.admin("GET", fnPath+"page/manifest", "", &m); code != 200 || !strings.Contains(m.YAML, "name: page") ||
		!strings.Contains(m.YAML, "runtime: python") || filepath.Base(m.File) != "functions.yaml" {
		t.Errorf("manifest: %d %+v", code, m)
	}

	var src struct {
		Files []SourceFile
	}
	if code := p.admin("GET", fnPath+"page/source", "", &src); code != 200 {
		t.Fatalf("source: %d", code)
	}
	files := map[string]SourceFile{}
	for _, f := range src.Files {
		files[f.Path] = f
	}
	if f := files["main.py"]; f.Content != handler {
		t.Errorf("main.py: %+v", f)
	}
	if files["blob.bin"].Omitted != "binary" || files["passwd"].Omitted != "symbolic link" || files["passwd"].Content != "" {
		t.Errorf("binary %+v, link %+v: want both omitted", files["blob.bin"], files["passwd"])
	}
	if _, ok := files["node_modules/x/index.js"]; ok {
		t.Error("node_modules listed")
	}

	for range 3 {
		if code, _, err := p.invoke("page", ""); code != 200 {
			t.Fatalf("invoke: %d %v", code, err)
		}
	}
	p.waitFor("the timeline counts the requests", 10*time.Second, func() bool {
		var s timeline.Series
		if p.admin("GET", fnPath+"page/timeline", "", &s) != 200 {
			return false // not sampled yet
		}
		total := 0.0
		for _, r := range s.RequestsPerSecond {
			total += r * s.StepSeconds
		}
		ready := s.Ready[len(s.Ready)-1]
		return len(s.Time) == int(timeline.Span/timeline.Step) && total == 4 && ready != nil && *ready == 1
	})
	var list struct{ Functions []FunctionStatus }
	if code := p.admin("GET", "/v1/functions", "", &list); code != 200 || list.Functions[0].Stats.Requests != 4 || list.Functions[0].Stats.P99Ms == nil {
		t.Errorf("list: %d, stats %+v: want 4 requests and a p99", code, list.Functions[0].Stats)
	}
}

// The session cookie opens the API to the console; a change riding on it
// must come as JSON, so another site's form cannot make one.
func TestCookieAuth(t *testing.T) {
	_, base, _ := adminPlatform(t)
	send := func(method, path, cookie, contentType, body string) int {
		req, _ := http.NewRequest(method, base+path, bytes.NewBufferString(body))
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: adminauth.Cookie, Value: cookie})
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, method, path, cookie, contentType, body string
		code                                          int
	}{
		{"no cookie", "GET", "/v1/functions", "", "", "", 401},
		{"wrong cookie", "GET", "/v1/functions", "nope", "", "", 401},
		{"read with the cookie", "GET", "/v1/functions", "tok", "", "", 200},
		{"invocations with the cookie", "GET", fnPath + "idle/invocations", "tok", "", "", 200},
		{"change from a form", "PATCH", fnPath + "idle/scale", "tok", "application/x-www-form-urlencoded", "min=1", 403},
		{"change as JSON", "PATCH", fnPath + "idle/scale", "tok", "application/json", `{"max": 4}`, 200},
		{"metrics need nothing", "GET", "/metrics", "", "", "", 200},
		{"the console asks for the token", "GET", "/ui/", "", "", "", 401},
		{"the console with the cookie", "GET", "/ui/", "tok", "", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := send(tc.method, tc.path, tc.cookie, tc.contentType, tc.body); code != tc.code {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, code, tc.code)
			}
		})
	}
}

// The status shows the requests waiting at the activator: what sless load
// samples each second.
func TestStatusShowsBuffered(t *testing.T) {
	p := startPlatformWith(t, manifest("held", "  concurrency: 1\n  scale: {initial: 1, max: 1}\n"), withToken)
	p.waitFor("ready", time.Minute, func() bool { return p.status("held").State == "ready" })
	done := make(chan struct{}, 3)
	for range 3 {
		go func() {
			_, _, _ = p.invoke("held", "sleep=1.5")
			done <- struct{}{}
		}()
	}
	p.waitFor("two buffered behind the one served", 10*time.Second, func() bool { return p.status("held").Buffered == 2 })
	for range 3 {
		<-done
	}
	if st := p.status("held"); st.Buffered != 0 {
		t.Errorf("after the requests: %d buffered", st.Buffered)
	}
}
