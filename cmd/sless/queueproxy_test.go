package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

const runMainEnv = "SLESS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startSless runs this test binary as the real `sless` with args and env
// added to the environment, under prefix (a command that runs another,
// such as prlimit) when given. exited receives its exit; it is killed when
// the test ends.
func startSless(t *testing.T, prefix, env []string, args ...string) (cmd *exec.Cmd, exited <-chan error) {
	t.Helper()
	argv := append(append(prefix[:len(prefix):len(prefix)], os.Args[0]), args...)
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, done
}

// queueProxyEnv configures `sless queue-proxy` in front of fn on the given
// ports.
func queueProxyEnv(fn *testfn.Process, serving, admin int) []string {
	return []string{"SLESS_USER_PORT=" + strconv.Itoa(fn.Port),
		"SLESS_SERVING_PORT=" + strconv.Itoa(serving), "SLESS_ADMIN_PORT=" + strconv.Itoa(admin)}
}

// TestQueueProxyCommandDrainsOnSIGTERM runs `sless queue-proxy` as a real
// process in front of a real function, sends it SIGTERM with a request in
// flight, and checks the request completes and the process exits 0.
func TestQueueProxyCommandDrainsOnSIGTERM(t *testing.T) {
	fn := testfn.Start(t)
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, queueProxyEnv(fn, serving, admin), "queue-proxy", "--function", "drain", "--drain-seconds", "20")

	readyz := "http://127.0.0.1:" + strconv.Itoa(admin) + "/readyz"
	waitStatus(t, readyz, http.StatusOK)

	inFlight := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(serving) + "/block?id=term")
		if err != nil {
			inFlight <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		inFlight <- resp.StatusCode
	}()
	eventually.True(t, "the request at the function", func() bool {
		resp, err := http.Get("http://" + fn.Addr() + "/max")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b) == "1"
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, readyz, http.StatusServiceUnavailable)
	if resp, err := http.Get("http://" + fn.Addr() + "/release?id=term"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if code := <-inFlight; code != http.StatusOK {
		t.Errorf("request in flight at SIGTERM got %d, want 200", code)
	}
	waitExit(t, "queue-proxy", exited, 15*time.Second)
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	// A process of the race-enabled test binary can take a minute to
	// start and sync its caches on a loaded machine.
	eventually.TrueWithin(t, 2*time.Minute, fmt.Sprintf("%s to answer %d", url, want), func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == want
	})
}

// stopAndWait sends sig to a real sless process and waits, up to within,
// for it to exit 0.
func stopAndWait(t *testing.T, what string, cmd *exec.Cmd, exited <-chan error, sig os.Signal, within time.Duration) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	waitExit(t, what, exited, within)
}

// waitExit waits, up to within, for a real sless process, stopped, to
// exit 0.
func waitExit(t *testing.T, what string, exited <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s exited with %v, want 0", what, err)
		}
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s of being stopped", what, within)
	}
}
