package runtimes

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/internal/needs"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wheeltest"
)

// pythonContractHandler answers scriptContractCases and
// scriptResponseCases.
const pythonContractHandler = `import asyncio, os, threading
from sless import Response

released = threading.Event()

def handle(event):
    path = event["path"]
    if path.startswith("/echo"):
        return event
    if path == "/respond/404":
        return Response({"error": "no such order"}, status=404,
                        headers={"Set-Cookie": ["a=1; Path=/", "b=2; Path=/", "c=3; Path=/"], "X-Trace": "t1"})
    if path == "/respond/png":
        return Response(b"\x89PNG\r\n", headers=[("Content-Type", "image/png")])
    if path == "/respond/created":
        return Response(status=201, headers={"Location": "/orders/7"})
    if path == "/stream":
        return (s for s in ["a", "b", "c"])
    if path == "/respond/stream":
        return Response(iter([b"a,b\n", b"1,2\n"]), status=202, headers={"Content-Type": "text/csv"})
    if path == "/respond/42":
        return Response("x", status=42)
    if path == "/events":
        return Response(events(), headers={"Content-Type": "text/event-stream"})
    if path == "/release":
        released.set()
        return None
    if path == "/stream/fail":
        return failing()
    if path == "/text":
        return "hello"
    if path == "/html":
        return "<html><body>hi</body></html>"
    if path == "/bytes":
        return b"\x00\x01\xff"
    if path == "/array":
        return [1, "two"]
    if path == "/none":
        return None
    if path == "/fail":
        raise ValueError("boom")
    if path == "/async":
        return later()
    if path == "/unencodable":
        return {1, 2}
    if path == "/crash":
        os._exit(3)
    return {"unknown": path}

async def later():
    await asyncio.sleep(0)
    return {"async": True}

def events():
    yield "data: one\n\n"
    yield "data: two\n\n" if released.wait(30) else "data: late\n\n"

def failing():
    yield "half"
    raise RuntimeError("disk on fire")
`

func TestPythonContract(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{"main.py": pythonContractHandler})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimePython, Dir: dir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inst := scriptLaunchReady(t, p)
	scriptInvoke(t, inst, scriptContractCases("ValueError"))
	scriptInvoke(t, inst, scriptResponseCases())
	scriptStreamsAsWritten(t, inst)
	scriptStreamFailureCuts(t, inst)
	scriptKeepAlive(t, inst)
	if out := inst.output.String(); !strings.Contains(out, "Traceback") || !strings.Contains(out, "ValueError: boom") {
		t.Errorf("the exception's traceback is not on stderr:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "__pycache__")); err == nil {
		t.Error("bytecode was written into the source directory")
	}
	scriptCrash(t, inst)
}

func TestPythonAsyncDefHandler(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{"app/__init__.py": "", "app/aio.py": `import asyncio

async def run(event):
    await asyncio.sleep(0)
    if "fail" in event["query"]:
        raise LookupError("later")
    return {"method": event["method"]}
`})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimePython, Dir: dir, Handler: "app.aio.run"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scriptInvoke(t, scriptLaunchReady(t, p), []scriptCase{
		{name: "awaited", method: "PATCH", target: "/", status: 200, contentType: "application/json", check: scriptBodyIs(`{"method":"PATCH"}`)},
		{name: "raised", method: "GET", target: "/?fail=1", status: 500, contentType: "application/json", check: scriptErrorNames("LookupError: later")},
	})
}

// TestPythonLoadFailures checks that a handler that cannot be loaded ends
// the process with exit code 1 and a message naming what is wrong.
func TestPythonLoadFailures(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{
		"main.py":   "def handle(event):\n    return event\n",
		"broken.py": "import not_a_module_anywhere\n",
	})
	scriptLoadFailures(t, v1alpha1.RuntimePython, dir, []scriptLoadFailure{
		{"main.missing", []string{"module 'main' (" + filepath.Join(dir, "main.py") + ") has no function 'missing'"}},
		{"broken.handle", []string{"No module named 'not_a_module_anywhere'", "cannot import module 'broken' of handler broken.handle from " + dir}},
	})
}

// TestPythonRequirementsFailure checks that a failed pip install is an
// error naming requirements.txt with pip's reason, and is not cached.
func TestPythonRequirementsFailure(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{"main.py": "def handle(e): return e\n", "requirements.txt": "not a valid requirement!!!\n"})
	cache := t.TempDir()
	for range 2 { // the second attempt installs again: a failure is not cached
		_, progress, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimePython, Dir: dir}, cache)
		if err == nil {
			t.Fatal("Prepare succeeded with an invalid requirements.txt")
		}
		for _, want := range []string{filepath.Join(dir, "requirements.txt"), "Invalid requirement", "not a valid requirement!!!"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not name %q: %v", want, err)
			}
		}
		if !strings.Contains(progress, "installing requirements.txt") {
			t.Errorf("progress = %q, want an installing line", progress)
		}
	}
}

// TestPythonRequirementsInstalled installs a wheel the test builds (PyPI is
// out of reach here), imports it from the handler, and checks a second
// Prepare uses the cache: the wheel is gone by then, so a second install
// would fail.
func TestPythonRequirementsInstalled(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	wheel := wheeltest.Build(t, "slesstiny", map[string]string{"slesstiny/__init__.py": "VALUE = 'from the wheel'\n"})
	dir := scriptSource(t, map[string]string{
		"main.py":          "import slesstiny\n\ndef handle(event):\n    return slesstiny.VALUE\n",
		"requirements.txt": wheel + "\n",
	})
	cache := t.TempDir()
	src := Source{Runtime: v1alpha1.RuntimePython, Dir: dir}
	p, progress, err := scriptPrepare(t, src, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress, "python default/fn: installing requirements.txt") || !strings.Contains(progress, "installed requirements.txt in") {
		t.Errorf("progress = %q, want installing and installed lines", progress)
	}
	scriptInvoke(t, scriptLaunchReady(t, p), []scriptCase{
		{name: "imports the dependency", method: "GET", target: "/", status: http.StatusOK, contentType: "text/plain", check: scriptBodyIs("from the wheel")},
	})
	if err := os.Remove(wheel); err != nil {
		t.Fatal(err)
	}
	again, progress, err := scriptPrepare(t, src, cache)
	if err != nil {
		t.Fatalf("second Prepare installed again: %v", err)
	}
	if progress != "" {
		t.Errorf("second Prepare wrote progress %q, want none", progress)
	}
	if strings.Join(again.Env, " ") != strings.Join(p.Env, " ") {
		t.Errorf("second Prepare env %q, want %q", again.Env, p.Env)
	}
}

// TestPythonSysExit checks that sys.exit in a handler ends the process, as
// in a script, rather than only the thread serving the request.
func TestPythonSysExit(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{"main.py": "import sys\n\ndef handle(event):\n    sys.exit(4)\n"})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimePython, Dir: dir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inst := scriptLaunchReady(t, p)
	if resp, err := http.Get(inst.url + "/"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("request answered %d", resp.StatusCode)
	}
	if code := inst.scriptExit(t); code != 4 {
		t.Errorf("exit code = %d, want 4", code)
	}
}

// TestPythonAbortedCall: a call the platform aborts (the client hung up,
// the timeout passed) leaves no traceback in the function's output, and
// the process serves on.
func TestPythonAbortedCall(t *testing.T) {
	t.Parallel()
	needs.Commands(t, "python3")
	dir := scriptSource(t, map[string]string{"main.py": "import time\ndef handle(event):\n    time.sleep(0.3)\n    return 'x' * 300000\n"})
	p, _, err := scriptPrepare(t, Source{Runtime: v1alpha1.RuntimePython, Dir: dir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inst := scriptLaunchReady(t, p)
	conn, err := net.Dial("tcp", strings.TrimPrefix(inst.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: fn\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	conn.Close() // reset: the answer's write fails
	// This call sleeps as long, and started later: its answer comes
	// after the aborted one's failed write.
	resp, err := http.Get(inst.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the aborted call: %v %v", resp, err)
	}
	resp.Body.Close()
	if out := inst.output.String(); strings.Contains(out, "Traceback") {
		t.Errorf("an aborted call printed a traceback:\n%s", out)
	}
}
