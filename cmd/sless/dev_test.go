package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
	"sless.dev/sless/internal/testfn"
)

const devManifest = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hi}
spec:
  runtime: python
  source: ./hi
  # Two instances throughout: the tests count them, and the autoscaler
  # would otherwise scale an idle function down as soon as it decides.
  scale: {initial: 2, min: 2}
`

// devHandler is hi: it prints a line per request (its method, path,
// body and X-Test header), holds it ?sleep=seconds, fails it with ?fail,
// and answers bytes with ?binary.
const devHandler = `import os, time
def handle(e):
    print('serving', e['method'], e['path'], 'body=' + e['body'], 'x-test=' + e['headers'].get('x-test', ''), flush=True)
    time.sleep(float(e['query'].get('sleep', '0')))
    if 'fail' in e['query']:
        raise ValueError('asked to fail')
    if 'until' in e['query']:
        return stream(e['query']['until'])
    if 'binary' in e['query']:
        return b'\x89PNG\r\n\x1a\n\x00\x00'
    return 'hi'

def stream(flag):
    yield 'first\n'
    for _ in range(600):
        if os.path.exists(flag):
            yield 'second\n'
            return
        time.sleep(0.05)
    yield 'late\n'
`

// devProcess is a real `sless dev` process.
type devProcess struct {
	cmd      *exec.Cmd
	exited   <-chan error
	cacheDir string
	url      string // of its function, hi (?sleep=seconds holds a request; ?until=file streams a line, then another once file exists, or "late" 30 s on)
	invoke   string // the invocation port's base URL
	admin    string // the admin API's base URL
	out      *syncbuf.Buffer
}

// startDev runs `sless dev` as a real process on a Python function with
// two instances, and waits until both serve.
func startDev(t *testing.T) (cmd *exec.Cmd, exited <-chan error, cacheDir string) {
	t.Helper()
	d := startDevWith(t, nil)
	return d.cmd, d.exited, d.cacheDir
}

// startDevWith is startDev with the command run under prefix (prlimit,
// say) and extra flags.
func startDevWith(t *testing.T, prefix []string, extra ...string) *devProcess {
	t.Helper()
	requirePython3(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "hi.yaml": devManifest})
	d := startDevIn(t, dir, prefix, extra...)
	eventually.True(t, "two instances", func() bool { return len(processesUsing(d.cacheDir)) == 2 })
	d.url = d.invoke + "/fn/default/hi"
	if code, body := fetch(t, d.url, ""); code != 200 || body != "hi" {
		t.Fatalf("GET %s = %d %q, want 200 hi", d.url, code, body)
	}
	return d
}

// startDevIn runs `sless dev` as a real process on the manifests in dir,
// with a cache directory of its own, and returns at once.
func startDevIn(t *testing.T, dir string, prefix []string, extra ...string) *devProcess {
	t.Helper()
	cacheDir := t.TempDir()
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	args := append(append(prefix, os.Args[0], "dev", "--functions", dir, "--cache-dir", cacheDir, "--drain", "5s",
		"--listen", "127.0.0.1:"+strconv.Itoa(serving), "--admin", "127.0.0.1:"+strconv.Itoa(admin)), extra...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("sless dev output:\n%s", out.String())
		}
	})
	return &devProcess{cmd: cmd, exited: done, cacheDir: cacheDir, out: out,
		invoke: "http://127.0.0.1:" + strconv.Itoa(serving), admin: "http://127.0.0.1:" + strconv.Itoa(admin)}
}

// writeFiles writes each file (path: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// processesUsing lists the processes whose command line names dir: the
// runtime processes of a platform with that cache directory.
func processesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) && !strings.Contains(string(cmdline), "--cache-dir") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Ctrl-C drains and stops every instance, and sless dev exits 0.
func TestDevInterruptLeavesNoProcess(t *testing.T) {
	cmd, exited, cacheDir := startDev(t)
	stopAndWait(t, "sless dev", cmd, exited, os.Interrupt, 30*time.Second)
	if pids := processesUsing(cacheDir); len(pids) > 0 {
		t.Errorf("processes left after sless dev exited: %v", pids)
	}
}

// Killed without a chance to clean up, sless dev still leaves no process:
// the kernel ends its children with it.
func TestDevKilledLeavesNoProcess(t *testing.T) {
	cmd, exited, cacheDir := startDev(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	eventually.True(t, "the instances to die with sless dev", func() bool { return len(processesUsing(cacheDir)) == 0 })
}
