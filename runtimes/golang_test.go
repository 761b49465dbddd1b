package runtimes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
)

// goEchoHandler answers by path, covering each kind of result.
const goEchoHandler = `package echo

import (
	"context"
	"errors"

	"sless.dev/sless/runtimes/go/sless"
)

type reply struct {
	Method string            ` + "`json:\"method\"`" + `
	Path   string            ` + "`json:\"path\"`" + `
	Query  map[string]string ` + "`json:\"query\"`" + `
	Tag    string            ` + "`json:\"tag\"`" + `
	Body   string            ` + "`json:\"body\"`" + `
}

func Handle(ctx context.Context, e sless.Event) (any, error) {
	switch e.Path {
	case "/text":
		return "hello", nil
	case "/html":
		return "<p>hi</p>", nil
	case "/bytes":
		return []byte{0, 1, 2}, nil
	case "/error":
		return nil, errors.New("no such order")
	case "/panic":
		panic("handler blew up")
	case "/event":
		return e, nil
	case "/nothing":
		return nil, nil
	}
	return reply{Method: e.Method, Path: e.Path, Query: e.Query, Tag: e.Headers["x-tag"], Body: string(e.Body)}, nil
}
`

// goSource writes files into a fresh directory and returns its path.
func goSource(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goPrepare prepares dir as Go function default/<name> and returns the
// process and the progress lines written.
func goPrepare(t *testing.T, dir, handler, name, cacheDir string) (Process, string, error) {
	t.Helper()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := Prepare(ctx, Source{Namespace: "default", Name: name, Runtime: v1alpha1.RuntimeGo, Dir: dir, Handler: handler},
		Options{CacheDir: cacheDir, Progress: &progress})
	return p, progress.String(), err
}

// goInstance is a started function process.
type goInstance struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncbuf.Buffer
	exited chan error
}

// goStart starts p on a free port and waits until /healthz answers; the
// process is killed at cleanup if still running.
func goStart(t *testing.T, p Process) *goInstance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	inst := &goInstance{
		cmd:    exec.Command(p.Path, p.Args...),
		url:    "http://127.0.0.1:" + strconv.Itoa(port),
		stderr: &syncbuf.Buffer{},
		exited: make(chan error, 1),
	}
	inst.cmd.Dir = p.Dir
	inst.cmd.Env = append(append(os.Environ(), p.Env...), "PORT="+strconv.Itoa(port))
	inst.cmd.Stderr = inst.stderr
	if err := inst.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { inst.exited <- inst.cmd.Wait() }()
	t.Cleanup(func() {
		_ = inst.cmd.Process.Kill()
		<-inst.exited
	})
	if !eventually.Holds(eventually.Within, func() bool {
		var resp *http.Response
		resp, err = http.Get(inst.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case err := <-inst.exited:
			inst.exited <- err
			t.Fatalf("function exited before it was healthy: %v\n%s", err, inst.stderr)
		default:
		}
		return false
	}) {
		t.Fatalf("function not healthy after %s: %v\n%s", eventually.Within, err, inst.stderr)
	}
	return inst
}

// goResponse is what a test needs of an answer.
type goResponse struct {
	status      int
	contentType string
	body        string
}

func (inst *goInstance) send(t *testing.T, method, target, body string, header map[string]string) goResponse {
	t.Helper()
	req, err := http.NewRequest(method, inst.url+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return goResponse{resp.StatusCode, resp.Header.Get("Content-Type"), string(data)}
}

// TestGoFunction builds a handler package without a go.mod once, then
// checks the contract against the running process, the cache, and a
// graceful stop.
func TestGoFunction(t *testing.T) {
	// Everything the build needs is embedded or in the standard library.
	t.Setenv("GOPROXY", "off")
	// Laid out as the samples are: a package without a go.mod inside this
	// repository's module, which the build must not need.
	root := goSource(t, map[string]string{
		"go.mod":                    "module sless.dev/sless\n\ngo 1.26\n\nrequire example.com/unreachable v1.0.0\n",
		"functions/echo/handler.go": goEchoHandler,
	})
	dir := filepath.Join(root, "functions", "echo")
	cacheDir := t.TempDir()
	p, progress, err := goPrepare(t, dir, "Handle", "echo", cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress, "go default/echo: building\n") || !strings.Contains(progress, "go default/echo: built in ") {
		t.Errorf("progress = %q, want the build announced and timed", progress)
	}
	if filepath.Base(p.Path) != "echo" || !strings.HasPrefix(p.Path, filepath.Join(cacheDir, "go")+string(filepath.Separator)) || p.Dir != dir {
		t.Errorf("process = %+v, want binary echo under %s/go running in %s", p, cacheDir, dir)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("source directory holds %v (%v) after the build, want handler.go alone", entries, err)
	}
	inst := goStart(t, p)

	tests := []struct {
		name, method, target, body string
		header                     map[string]string
		wantStatus                 int
		wantType, wantBody         string
	}{
		{name: "struct as JSON", method: "GET", target: "/orders/7?id=1&id=2&q=a%20b", header: map[string]string{"X-Tag": "blue"},
			wantStatus: 200, wantType: "application/json",
			wantBody: `{"method":"GET","path":"/orders/7","query":{"id":"1","q":"a b"},"tag":"blue","body":""}`},
		{name: "POST body round trip", method: "POST", target: "/orders", body: `{"n":1}`,
			wantStatus: 200, wantType: "application/json",
			wantBody: `{"method":"POST","path":"/orders","query":{},"tag":"","body":"{\"n\":1}"}`},
		{name: "string as text", method: "GET", target: "/text", wantStatus: 200, wantType: "text/plain; charset=utf-8", wantBody: "hello"},
		{name: "markup as HTML", method: "GET", target: "/html", wantStatus: 200, wantType: "text/html; charset=utf-8", wantBody: "<p>hi</p>"},
		{name: "bytes", method: "GET", target: "/bytes", wantStatus: 200, wantType: "application/octet-stream", wantBody: "\x00\x01\x02"},
		{name: "error", method: "GET", target: "/error", wantStatus: 500, wantType: "application/json", wantBody: `{"error":"no such order"}`},
		{name: "panic", method: "GET", target: "/panic", wantStatus: 500, wantType: "application/json", wantBody: `{"error":"panic: handler blew up"}`},
		{name: "after a panic", method: "GET", target: "/text", wantStatus: 200, wantType: "text/plain; charset=utf-8", wantBody: "hello"},
		{name: "nil as no content", method: "DELETE", target: "/nothing", wantStatus: 204},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inst.send(t, tt.method, tt.target, tt.body, tt.header)
			if got.status != tt.wantStatus || got.contentType != tt.wantType || got.body != tt.wantBody {
				t.Errorf("%s %s = %d %q %q, want %d %q %q", tt.method, tt.target, got.status, got.contentType, got.body,
					tt.wantStatus, tt.wantType, tt.wantBody)
			}
		})
	}
	t.Run("event as JSON", func(t *testing.T) {
		got := inst.send(t, "POST", "/event?a=1&a=2", "\xff\x00", map[string]string{"X-Tag": "blue"})
		var e struct {
			Method, Path, Body string
			Query, Headers     map[string]string
			IsBase64Encoded    bool
		}
		if err := json.Unmarshal([]byte(got.body), &e); err != nil {
			t.Fatalf("%s: %v", got.body, err)
		}
		if e.Method != "POST" || e.Path != "/event" || e.Query["a"] != "1" || e.Headers["x-tag"] != "blue" ||
			e.Body != "/wA=" || !e.IsBase64Encoded {
			t.Errorf("event = %s, want the request in the shared event shape", got.body)
		}
	})
	// The stack trace names the user's own file.
	if stderr := inst.stderr.String(); !strings.Contains(stderr, filepath.Join(dir, "handler.go")+":") {
		t.Errorf("panic log does not name %s/handler.go:\n%s", dir, stderr)
	}

	t.Run("cache hit", func(t *testing.T) {
		again, progress, err := goPrepare(t, dir, "Handle", "echo", cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		if again.Path != p.Path || again.Dir != p.Dir || progress != "" {
			t.Errorf("second prepare = %+v with progress %q, want %+v and no build", again, progress, p)
		}
	})

	t.Run("SIGTERM stops gracefully", func(t *testing.T) {
		if err := inst.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-inst.exited:
			inst.exited <- err
			if err != nil {
				t.Errorf("function exited with %v after SIGTERM, want status 0", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("function still running 30s after SIGTERM")
		}
	})
}

// A Go function may be written as net/http serves: a
// func(http.ResponseWriter, *http.Request) or an http.Handler value. It
// chooses its status and headers, streams with http.Flusher, and the
// runtime still answers /healthz.
func TestGoHTTPHandlerFunction(t *testing.T) {
	t.Setenv("GOPROXY", "off")
	const handlers = `package web

import (
	"io"
	"net/http"
)

func Handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Add("Set-Cookie", "a=1")
	w.Header().Add("Set-Cookie", "b=2")
	w.Header().Set("Content-Type", "text/csv")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "got,"+string(body)+"\n")
	w.(http.Flusher).Flush()
	io.WriteString(w, "done\n")
}

var Mux = func() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return m
}()
`
	dir := goSource(t, map[string]string{"web.go": handlers})
	cacheDir := t.TempDir()
	for _, tt := range []struct {
		handler, method, target string
		wantStatus              int
		wantType, wantBody      string
		wantCookies             []string
	}{
		{"Handle", "POST", "/orders", 201, "text/csv", "got,order\ndone\n", []string{"a=1", "b=2"}},
		{"Mux", "GET", "/missing", 404, "text/plain; charset=utf-8", "404 page not found\n", nil},
	} {
		t.Run(tt.handler, func(t *testing.T) {
			p, _, err := goPrepare(t, dir, tt.handler, strings.ToLower(tt.handler), cacheDir)
			if err != nil {
				t.Fatal(err)
			}
			inst := goStart(t, p) // its /healthz answered
			req, _ := http.NewRequest(tt.method, inst.url+tt.target, strings.NewReader("order"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != tt.wantType || string(body) != tt.wantBody ||
				!slices.Equal(resp.Header.Values("Set-Cookie"), tt.wantCookies) {
				t.Errorf("%s %s = %d %q %q, cookies %q; want %d %q %q, %q", tt.method, tt.target, resp.StatusCode,
					resp.Header.Get("Content-Type"), body, resp.Header.Values("Set-Cookie"), tt.wantStatus, tt.wantType, tt.wantBody, tt.wantCookies)
			}
		})
	}
}

// TestGoBuildErrors checks that a failed build names what the user must
// fix.
func TestGoBuildErrors(t *testing.T) {
	cacheDir := t.TempDir()
	tests := []struct {
		name    string
		files   map[string]string
		handler string
		want    func(dir string) string
	}{
		{
			name:    "syntax error",
			files:   map[string]string{"ok.go": "package fn\n", "broken.go": "package fn\n\nfunc Handle( {\n}\n"},
			handler: "Handle",
			want:    func(dir string) string { return filepath.Join(dir, "broken.go") + ":3:" },
		},
		{
			name:    "missing handler",
			files:   map[string]string{"fn.go": "package fn\n\nfunc Other() {}\n"},
			handler: "Handle",
			want:    func(dir string) string { return "handler Handle not found in " + dir },
		},
		{
			name:    "wrong signature",
			files:   map[string]string{"fn.go": "package fn\n\nimport \"context\"\n\nfunc Run(ctx context.Context) error { return nil }\n"},
			handler: "Run",
			want: func(dir string) string {
				return "handler Run in " + dir + " must be func(context.Context, sless.Event) (any, error), " +
					"func(http.ResponseWriter, *http.Request) or an http.Handler, not func(ctx context.Context) error"
			},
		},
		{
			name:    "not a handler",
			files:   map[string]string{"fn.go": "package fn\n\nvar Handle = 42\n"},
			handler: "Handle",
			want: func(dir string) string {
				return "handler Handle in " + dir + " must be func(context.Context, sless.Event) (any, error), " +
					"func(http.ResponseWriter, *http.Request) or an http.Handler, not int"
			},
		},
		{
			name:    "no Go files",
			files:   map[string]string{"README.md": "hello", "fn_test.go": "package fn\n"},
			handler: "Handle",
			want:    func(dir string) string { return "no Go files in " + dir },
		},
		{
			name:    "unexported handler",
			files:   map[string]string{"fn.go": "package fn\n"},
			handler: "handle",
			want:    func(string) string { return `handler "handle" is not an exported Go function name` },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := goSource(t, tt.files)
			_, _, err := goPrepare(t, dir, tt.handler, "broken", cacheDir)
			t.Logf("prepare: %v", err)
			if err == nil || !strings.Contains(err.Error(), tt.want(dir)) {
				t.Errorf("prepare = %v, want an error containing %q", err, tt.want(dir))
			}
		})
	}
}

// TestGoModuleFunction builds a function with its own go.mod that needs
// a third-party module and requires the SDK's module, replaced by a
// checkout the build must not depend on, as samples nested in this
// repository do; and one written when the SDK was part of sless.dev/sless,
// which required that instead.
func TestGoModuleFunction(t *testing.T) {
	const uuid = "github.com/google/uuid v1.6.0"
	sums := goSumLines(t, "../go.sum", uuid)
	if goModuleCached(t, "github.com/google/uuid@v1.6.0") {
		t.Setenv("GOPROXY", "off") // proves the build works from the module cache
	}
	for _, sdk := range []string{"sless.dev/sless/runtimes/go", "sless.dev/sless"} {
		t.Run(sdk, func(t *testing.T) {
			dir := goSource(t, map[string]string{
				"go.mod": "module example.com/idfn\n\ngo 1.22\n\nrequire (\n\t" + uuid + "\n\t" + sdk + " v0.0.0\n)\n\n" +
					"replace " + sdk + " => ../../no/checkout/here\n",
				"go.sum": sums,
				"fn.go": `package idfn

import (
	"context"

	"github.com/google/uuid"
	"sless.dev/sless/runtimes/go/sless"
)

func NewID(ctx context.Context, e sless.Event) (any, error) {
	return map[string]string{"id": uuid.NewString()}, nil
}
`,
			})
			p, _, err := goPrepare(t, dir, "NewID", "idfn", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			inst := goStart(t, p)
			got := inst.send(t, "GET", "/", "", nil)
			var reply struct{ ID string }
			if err := json.Unmarshal([]byte(got.body), &reply); err != nil || got.status != 200 || len(reply.ID) != 36 {
				t.Errorf("GET / = %d %q (%v), want 200 with a UUID", got.status, got.body, err)
			}
		})
	}
}

// goSumLines returns the lines of a go.sum file that start with prefix.
func goSumLines(t *testing.T, file, prefix string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, prefix+" ") || strings.HasPrefix(line, prefix+"/") {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s has no lines for %s", file, prefix)
	}
	return strings.Join(lines, "\n") + "\n"
}

func goModuleCached(t *testing.T, moduleAtVersion string) bool {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(strings.TrimSpace(string(out)), moduleAtVersion))
	return err == nil
}

// Each edit of a Go function is a new build of several megabytes: the
// cache keeps the last few of each function and removes the older ones,
// and leaves other functions' builds alone.
func TestGoBuildsPruned(t *testing.T) {
	t.Setenv("GOPROXY", "off")
	echo := goSource(t, map[string]string{"handler.go": goEchoHandler})
	other := goSource(t, map[string]string{"handler.go": goEchoHandler})
	cacheDir := t.TempDir()
	otherBuild, _, err := goPrepare(t, other, "Handle", "other", cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	var builds []string
	for i := range goKeptBuilds + 2 {
		goWrite(t, filepath.Join(echo, "edit.go"), fmt.Sprintf("package echo\n\nconst edit = %d\n", i))
		p, _, err := goPrepare(t, echo, "Handle", "echo", cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		builds = append(builds, p.Path)
	}
	for i, bin := range builds {
		_, err := os.Stat(bin)
		if kept := i >= len(builds)-goKeptBuilds; kept != (err == nil) {
			t.Errorf("build %d of %d: kept = %v, want %v (stat: %v)", i+1, len(builds), err == nil, kept, err)
		}
	}
	if _, err := os.Stat(otherBuild.Path); err != nil {
		t.Errorf("another function's build was removed: %v", err)
	}
}

func TestGoBuildKey(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dir := goSource(t, map[string]string{"fn.go": "package fn\n", "static/page.html": "<p>", ".git/HEAD": "ref"})
	src := Source{Name: "fn", Dir: dir, Handler: "Handle"}
	base, err := goBuildKey(src, goTool, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		change  func(t *testing.T, src *Source)
		changed bool
	}{
		{"nothing", func(*testing.T, *Source) {}, false},
		{"hidden directory", func(t *testing.T, _ *Source) { goWrite(t, filepath.Join(dir, ".git/HEAD"), "other") }, false},
		{"handler", func(_ *testing.T, src *Source) { src.Handler = "Other" }, true},
		{"name", func(_ *testing.T, src *Source) { src.Name = "other" }, true},
		{"source file", func(t *testing.T, _ *Source) { goWrite(t, filepath.Join(dir, "fn.go"), "package fn // changed\n") }, true},
		{"embedded file", func(t *testing.T, _ *Source) { goWrite(t, filepath.Join(dir, "static/page.html"), "<b>") }, true},
		{"new file", func(t *testing.T, _ *Source) { goWrite(t, filepath.Join(dir, "go.sum"), "") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := src
			tt.change(t, &changed)
			key, err := goBuildKey(changed, goTool, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (key != base) != tt.changed {
				t.Errorf("key changed = %v, want %v", key != base, tt.changed)
			}
			base = key
		})
	}
}

func goWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGoSDKEmbedded checks that the embedded SDK is the module in this
// repository, tests left out, written where it is here, below a go.mod of
// the module it used to be part of; and that it needs nothing but the
// standard library.
func TestGoSDKEmbedded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sdk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fillGoSDK(dir); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Glob("go/sless/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range append(want, "go/go.mod") {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		orig, _ := os.ReadFile(f)
		written, err := os.ReadFile(filepath.Join(dir, "runtimes", f))
		if err != nil || !bytes.Equal(orig, written) {
			t.Errorf("%s not written as it is in the repository (%v)", f, err)
		}
	}
	var written int
	err = filepath.WalkDir(filepath.Join(dir, goSDKDir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written++
		}
		return err
	})
	if err != nil || written != n || n <= 1 {
		t.Errorf("sdk holds %d files (%v), want go.mod and the %d non-test files", written, err, n-1)
	}
	sdkModule, err := goSDKModule()
	if mod, _ := os.ReadFile(filepath.Join(dir, goSDKDir, "go.mod")); err != nil || goModulePath(mod) != sdkModule || sdkModule != "sless.dev/sless/runtimes/go" {
		t.Errorf("sdk go.mod = %q, module %q (%v), want module sless.dev/sless/runtimes/go", mod, sdkModule, err)
	}
	if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || goModulePath(mod) != goLegacyModule {
		t.Errorf("go.mod above the sdk = %q (%v), want module %s", mod, err, goLegacyModule)
	}
	if mod, _ := os.ReadFile("go/go.mod"); regexp.MustCompile(`(?m)^\s*require\b`).Match(mod) {
		t.Errorf("the SDK's go.mod requires modules, want the standard library only:\n%s", mod)
	}
}
