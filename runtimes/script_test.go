package runtimes

// Shared by the Python and Node runtime tests: real interpreters run the
// embedded runtime scripts, and the same table of invocations checks both
// against the runtime contract.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/syncbuf"
)

// scriptSource writes files (path → content) into a new directory.
func scriptSource(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// scriptPrepare prepares src with a fresh or given cache directory and
// returns the process and the progress lines written.
func scriptPrepare(t *testing.T, src Source, cacheDir string) (Process, string, error) {
	t.Helper()
	if src.Namespace == "" {
		src.Namespace, src.Name = "default", "fn"
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := Prepare(ctx, src, Options{CacheDir: cacheDir, Progress: &progress})
	return p, progress.String(), err
}

// scriptInstance is a started runtime process.
type scriptInstance struct {
	url    string
	proc   *os.Process
	output *syncbuf.Buffer
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before exited closes
}

// scriptLaunch starts p as the supervisor would, with PORT set, and kills
// it when the test ends.
func scriptLaunch(t *testing.T, p Process) *scriptInstance {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = append(append(os.Environ(), p.Env...), "PORT="+strconv.Itoa(port))
	inst := &scriptInstance{url: "http://127.0.0.1:" + strconv.Itoa(port), output: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = inst.output, inst.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inst.proc = cmd.Process
	go func() {
		inst.err = cmd.Wait()
		close(inst.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-inst.exited
		if t.Failed() {
			t.Logf("process output:\n%s", inst.output)
		}
	})
	return inst
}

// scriptLaunchReady starts p and waits until it answers GET /healthz with 200.
func scriptLaunchReady(t *testing.T, p Process) *scriptInstance {
	t.Helper()
	inst := scriptLaunch(t, p)
	var err error
	if !eventually.Holds(eventually.Within, func() bool {
		var resp *http.Response
		resp, err = http.Get(inst.url + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-inst.exited:
			t.Fatalf("process exited before it was healthy: %v\n%s", inst.err, inst.output)
		default:
		}
		return false
	}) {
		t.Fatalf("no healthy /healthz within %s (last error %v)\n%s", eventually.Within, err, inst.output)
	}
	return inst
}

// scriptExit waits until the process exits and returns its exit code.
func (i *scriptInstance) scriptExit(t *testing.T) int {
	t.Helper()
	select {
	case <-i.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("process still running after 30s\n%s", i.output)
	}
	var exit *exec.ExitError
	if !errors.As(i.err, &exit) {
		return 0
	}
	return exit.ExitCode()
}

// scriptEvent is the event as the echo route returns it.
type scriptEvent struct {
	Method          string            `json:"method"`
	Path            string            `json:"path"`
	Query           map[string]string `json:"query"`
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	IsBase64Encoded bool              `json:"isBase64Encoded"`
}

// scriptCase is one invocation of the contract handler and what must come
// back. The Python and Node test handlers route by path the same way.
type scriptCase struct {
	name        string
	method      string
	target      string
	headers     [][2]string
	body        []byte
	chunked     bool // send the body without a length
	status      int
	contentType string                          // media type, parameters ignored
	check       func(t *testing.T, body []byte) // nil: no check of the body
	// fields are response fields whose values must be these, in order.
	fields http.Header
}

func scriptEcho(want scriptEvent) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		var got scriptEvent
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("echo is not an event: %v: %s", err, body)
		}
		if got.Method != want.Method || got.Path != want.Path || got.Body != want.Body || got.IsBase64Encoded != want.IsBase64Encoded {
			t.Errorf("event = %+v, want method %q path %q body %q isBase64Encoded %v", got, want.Method, want.Path, want.Body, want.IsBase64Encoded)
		}
		if len(got.Query) != len(want.Query) {
			t.Errorf("query = %v, want %v", got.Query, want.Query)
		}
		for k, v := range want.Query {
			if got.Query[k] != v {
				t.Errorf("query[%q] = %q, want %q", k, got.Query[k], v)
			}
		}
		if !strings.HasPrefix(got.Headers["host"], "127.0.0.1:") {
			t.Errorf("headers[host] = %q, want the address called", got.Headers["host"])
		}
		for k, v := range want.Headers {
			if got.Headers[k] != v {
				t.Errorf("headers[%q] = %q, want %q (headers %v)", k, got.Headers[k], v, got.Headers)
			}
		}
	}
}

func scriptBodyIs(want string) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		if string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
	}
}

func scriptErrorNames(want string) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		var got struct{ Error string }
		if err := json.Unmarshal(body, &got); err != nil || !strings.Contains(got.Error, want) {
			t.Errorf("body = %s, want JSON {\"error\": ...%s...}", body, want)
		}
	}
}

// scriptContractCases are the invocations every script runtime answers
// alike; errorType is how the runtime names the /fail exception.
func scriptContractCases(errorType string) []scriptCase {
	return []scriptCase{
		{name: "GET echo", method: "GET", target: "/echo/a%20b?a=1&a=2&b=x+y&c=",
			headers: [][2]string{{"X-Test", "v"}, {"X-Multi", "one"}, {"X-Multi", "two"}},
			status:  200, contentType: "application/json",
			check: scriptEcho(scriptEvent{Method: "GET", Path: "/echo/a b", Query: map[string]string{"a": "1", "b": "x y", "c": ""},
				Headers: map[string]string{"x-test": "v", "x-multi": "one, two"}})},
		{name: "POST text body", method: "POST", target: "/echo", body: []byte("héllo\n"),
			headers: [][2]string{{"Content-Type", "text/plain"}}, status: 200, contentType: "application/json",
			check: scriptEcho(scriptEvent{Method: "POST", Path: "/echo", Body: "héllo\n", Headers: map[string]string{"content-type": "text/plain", "content-length": "7"}})},
		{name: "PUT binary body", method: "PUT", target: "/echo", body: []byte{0xff, 0xfe, 0}, status: 200, contentType: "application/json",
			check: scriptEcho(scriptEvent{Method: "PUT", Path: "/echo", Body: "//4A", IsBase64Encoded: true})},
		{name: "POST chunked body", method: "POST", target: "/echo", body: bytes.Repeat([]byte("chunk"), 1000), chunked: true,
			status: 200, contentType: "application/json",
			check: scriptEcho(scriptEvent{Method: "POST", Path: "/echo", Body: strings.Repeat("chunk", 1000)})},
		{name: "string", method: "GET", target: "/text", status: 200, contentType: "text/plain", check: scriptBodyIs("hello")},
		{name: "html string", method: "GET", target: "/html", status: 200, contentType: "text/html", check: scriptBodyIs("<html><body>hi</body></html>")},
		{name: "bytes", method: "GET", target: "/bytes", status: 200, contentType: "application/octet-stream", check: scriptBodyIs("\x00\x01\xff")},
		{name: "array", method: "GET", target: "/array", status: 200, contentType: "application/json", check: scriptBodyIs(`[1,"two"]`)},
		{name: "nothing", method: "DELETE", target: "/none", status: 204, check: scriptBodyIs("")},
		{name: "exception", method: "GET", target: "/fail", status: 500, contentType: "application/json", check: scriptErrorNames(errorType + ": boom")},
		{name: "after the exception", method: "GET", target: "/text", status: 200, contentType: "text/plain", check: scriptBodyIs("hello")},
		{name: "async", method: "GET", target: "/async", status: 200, contentType: "application/json", check: scriptBodyIs(`{"async":true}`)},
		{name: "unencodable result", method: "GET", target: "/unencodable", status: 500, contentType: "application/json", check: scriptErrorNames("")},
		{name: "healthz is the runtime's", method: "GET", target: "/healthz", status: 200, contentType: "text/plain", check: scriptBodyIs("ok")},
		{name: "the largest head the platform sends", method: "GET", target: "/echo", headers: platformHead(),
			status: 200, contentType: "application/json",
			check: scriptEcho(scriptEvent{Method: "GET", Path: "/echo", Headers: map[string]string{"x-f100": platformHead()[100][1]}})},
	}
}

// scriptResponseCases are the answers a handler chooses, every script
// runtime alike, each in its idiom (the Python and Node test handlers
// route by path the same way).
func scriptResponseCases() []scriptCase {
	return []scriptCase{
		{name: "status, cookies in order and JSON", method: "GET", target: "/respond/404", status: 404, contentType: "application/json",
			check:  scriptBodyIs(`{"error":"no such order"}`),
			fields: http.Header{"Set-Cookie": {"a=1; Path=/", "b=2; Path=/", "c=3; Path=/"}, "X-Trace": {"t1"}}},
		{name: "bytes of a type of its own", method: "GET", target: "/respond/png", status: 200, contentType: "image/png",
			check: scriptBodyIs("\x89PNG\r\n")},
		{name: "status without a body", method: "POST", target: "/respond/created", status: 201, check: scriptBodyIs(""),
			fields: http.Header{"Location": {"/orders/7"}}},
		{name: "streamed", method: "GET", target: "/stream", status: 200, contentType: "text/plain", check: scriptBodyIs("abc")},
		{name: "streamed with a status and a type", method: "GET", target: "/respond/stream", status: 202, contentType: "text/csv",
			check: scriptBodyIs("a,b\n1,2\n")},
		{name: "status out of range", method: "GET", target: "/respond/42", status: 500, contentType: "application/json",
			check: scriptErrorNames("599")},
	}
}

// scriptStreamsAsWritten checks that a streamed answer's first event
// reaches the caller while the handler still runs: the handler holds its
// second event until the test, having read the first, asks /release.
func scriptStreamsAsWritten(t *testing.T, inst *scriptInstance) {
	t.Helper()
	resp, err := http.Get(inst.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	released, err := http.Get(inst.url + "/release")
	if err != nil {
		t.Fatal(err)
	}
	released.Body.Close()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: two\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("after the first event: %q %v, Content-Type %q: want the second, released, event", rest, err, resp.Header.Get("Content-Type"))
	}
}

// scriptStreamFailureCuts checks that a streamed body that fails cuts the
// answer: the caller sees it end early, never a whole answer.
func scriptStreamFailureCuts(t *testing.T, inst *scriptInstance) {
	t.Helper()
	resp, err := http.Get(inst.url + "/stream/fail")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("a stream that failed read whole: %q", body)
	}
}

// platformHead are more fields, and more bytes, than the activator lets
// through (forward.MaxHeaderFields, MaxHeadBytes), as many as the
// queue-proxy in front of a runtime takes (InnerHeadBytes): the fields the
// platform adds included, a runtime must serve them, not refuse them its
// own way.
func platformHead() [][2]string {
	n := forward.MaxHeaderFields + 10
	value := strings.Repeat("v", (forward.InnerHeadBytes-1<<10)/n-len("X-F000: \r\n"))
	h := make([][2]string, n)
	for i := range h {
		h[i] = [2]string{fmt.Sprintf("X-F%03d", i), value}
	}
	return h
}

// scriptInvoke runs the cases in order against inst.
func scriptInvoke(t *testing.T, inst *scriptInstance, cases []scriptCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // unknown length: sent chunked
			}
			req, err := http.NewRequest(c.method, inst.url+c.target, body)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range c.headers {
				req.Header.Add(h[0], h[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, c.status, got)
			}
			if c.contentType != "" {
				if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != c.contentType {
					t.Errorf("Content-Type = %q, want %s", resp.Header.Get("Content-Type"), c.contentType)
				}
			}
			if c.check != nil {
				c.check(t, got)
			}
			for name, want := range c.fields {
				if got := resp.Header.Values(name); !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if server := resp.Header.Get("Server"); server != "" {
				t.Errorf("Server = %q: an answer says nothing of the runtime", server)
			}
		})
	}
}

// scriptKeepAlive checks that two requests in a row share one connection.
func scriptKeepAlive(t *testing.T, inst *scriptInstance) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	reused := make([]bool, 2)
	for i := range reused {
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused[i] = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", inst.url+"/text", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if !reused[1] {
		t.Error("the second request did not reuse the first one's connection")
	}
}

// scriptCrash checks that a handler ending the process ends the instance
// with the handler's exit code.
func scriptCrash(t *testing.T, inst *scriptInstance) {
	t.Helper()
	resp, err := http.Get(inst.url + "/crash")
	if err == nil {
		_ = resp.Body.Close()
		t.Errorf("crash request answered %d", resp.StatusCode)
	}
	if code := inst.scriptExit(t); code != 3 {
		t.Errorf("exit code = %d, want 3", code)
	}
}

// TestScriptPrepareErrors checks that what prepare can see wrong is
// refused with an error naming it, before any process starts.
func TestScriptPrepareErrors(t *testing.T) {
	dir := scriptSource(t, map[string]string{"main.py": "def handle(e): return e\n", "index.js": "exports.handle = (e) => e;\n"})
	cases := []struct {
		name    string
		src     Source
		path    string // PATH during Prepare; "" keeps it
		wantErr string
	}{
		{"python module missing", Source{Runtime: v1alpha1.RuntimePython, Dir: dir, Handler: "nope.handle"}, "", "no nope.py in " + dir},
		{"python package module missing", Source{Runtime: v1alpha1.RuntimePython, Dir: dir, Handler: "pkg.app.handle"}, "", "no pkg/app.py in"},
		{"node module missing", Source{Runtime: v1alpha1.RuntimeNode, Dir: dir, Handler: "lib/app.handle"}, "", "no lib/app.js in " + dir},
		{"handler without function", Source{Runtime: v1alpha1.RuntimeNode, Dir: dir, Handler: "index"}, "", `handler "index" of default/fn: want module.function`},
		{"source missing", Source{Runtime: v1alpha1.RuntimePython, Dir: filepath.Join(dir, "gone")}, "", "source directory of default/fn: stat " + filepath.Join(dir, "gone")},
		{"python3 missing", Source{Runtime: v1alpha1.RuntimePython, Dir: dir}, t.TempDir(), "python runtime needs python3 on PATH"},
		{"node missing", Source{Runtime: v1alpha1.RuntimeNode, Dir: dir}, t.TempDir(), "node runtime needs node on PATH"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.path != "" {
				t.Setenv("PATH", c.path)
			}
			_, _, err := scriptPrepare(t, c.src, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Prepare error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

// TestScriptRuntimeFiles checks that the runtime scripts are written from
// the binary into the cache once, under a path that names their content.
func TestScriptRuntimeFiles(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3", "node")
	dir := scriptSource(t, map[string]string{"main.py": "def handle(e): return e\n", "index.js": "exports.handle = (e) => e;\n"})
	cache := t.TempDir()
	for _, c := range []struct {
		runtime v1alpha1.Runtime
		script  []byte
	}{{v1alpha1.RuntimePython, pythonRuntimeScript}, {v1alpha1.RuntimeNode, nodeRuntimeScript}} {
		t.Run(string(c.runtime), func(t *testing.T) {
			first, _, err := scriptPrepare(t, Source{Runtime: c.runtime, Dir: dir}, cache)
			if err != nil {
				t.Fatal(err)
			}
			second, _, err := scriptPrepare(t, Source{Runtime: c.runtime, Dir: dir}, cache)
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Args) != 1 || len(second.Args) != 1 || first.Args[0] != second.Args[0] {
				t.Fatalf("args %q then %q, want the same one script", first.Args, second.Args)
			}
			if !strings.Contains(first.Args[0], scriptHash(c.script)[:16]) {
				t.Errorf("script path %s does not name its content", first.Args[0])
			}
			written, err := os.ReadFile(first.Args[0])
			if err != nil || !bytes.Equal(written, c.script) {
				t.Errorf("written script differs from the embedded one (err %v)", err)
			}
			if !filepath.IsAbs(first.Path) || first.Dir != dir {
				t.Errorf("process %+v: want an absolute interpreter path, run in %s", first, dir)
			}
		})
	}
}

// scriptLoadFailure is a handler that cannot be loaded and what the
// process must say about it.
type scriptLoadFailure struct {
	handler string
	want    []string
}

// scriptLoadFailures checks that each handler ends the process with exit
// code 1 and a message naming what is wrong.
func scriptLoadFailures(t *testing.T, rt v1alpha1.Runtime, dir string, cases []scriptLoadFailure) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.handler, func(t *testing.T) {
			p, _, err := scriptPrepare(t, Source{Runtime: rt, Dir: dir, Handler: c.handler}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			inst := scriptLaunch(t, p)
			if code := inst.scriptExit(t); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			for _, want := range c.want {
				if out := inst.output.String(); !strings.Contains(out, want) {
					t.Errorf("output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}

// SIGTERM, the platform stopping an instance, ends each script runtime
// gracefully: the request in flight is answered, then the process exits 0.
// (Without a handler, a runtime that is PID 1 of a container ignored it,
// and its pod waited out its whole grace period.)
func TestScriptRuntimesStopOnSIGTERM(t *testing.T) {
	for _, tc := range []struct {
		runtime      v1alpha1.Runtime
		interpreter  string
		file, source string
	}{
		{v1alpha1.RuntimePython, "python3", "main.py",
			"import sys, time\ndef handle(event):\n    print('started', file=sys.stderr, flush=True)\n    time.sleep(1)\n    return 'done'\n"},
		{v1alpha1.RuntimeNode, "node", "index.js",
			"exports.handle = async () => { console.error('started'); await new Promise((r) => setTimeout(r, 1000)); return 'done'; };\n"},
	} {
		t.Run(string(tc.runtime), func(t *testing.T) {
			t.Parallel()
			needs.Commands(t, tc.interpreter)
			dir := scriptSource(t, map[string]string{tc.file: tc.source})
			p, _, err := scriptPrepare(t, Source{Runtime: tc.runtime, Dir: dir}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			inst := scriptLaunchReady(t, p)
			type answer struct {
				code int
				body string
				err  error
			}
			answered := make(chan answer, 1)
			go func() {
				resp, err := http.Get(inst.url + "/slow")
				if err != nil {
					answered <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				answered <- answer{resp.StatusCode, string(body), err}
			}()
			eventually.True(t, "the request in the handler", func() bool { return strings.Contains(inst.output.String(), "started") })
			if err := inst.proc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if a := <-answered; a.err != nil || a.code != http.StatusOK || a.body != "done" {
				t.Errorf("the request in flight at SIGTERM: %d %q %v, want 200 done", a.code, a.body, a.err)
			}
			if code := inst.scriptExit(t); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
		})
	}
}
