package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
)

// holdRequest sends a request that the function holds for an hour, and
// waits until it is in flight at an instance.
func holdRequest(t *testing.T, d *devProcess) {
	t.Helper()
	go func() {
		if resp, err := http.Get(d.url + "?sleep=3600"); err == nil {
			resp.Body.Close()
		}
	}()
	eventually.True(t, "the request in flight", func() bool {
		_, body := fetch(t, d.admin+"/metrics", "")
		return inFlight(body)
	})
}

// inFlight reports a request in flight at any queue-proxy on a /metrics page.
func inFlight(page string) bool {
	for line := range strings.Lines(page) {
		if strings.HasPrefix(line, "sless_queueproxy_inflight_requests{") && strings.HasSuffix(line, " 1\n") {
			return true
		}
	}
	return false
}

// --drain is the whole budget of a stop: a request still in flight when it
// is spent is cut, every instance is stopped, and sless dev exits 0 having
// said what it drained.
func TestDevDrainBudget(t *testing.T) {
	d := startDevWith(t, nil, "--drain", "2s")
	holdRequest(t, d)
	stopAndWait(t, "sless dev", d.cmd, d.exited, os.Interrupt, 30*time.Second)
	if out := d.out.String(); !strings.Contains(out, "draining 1 requests and 2 instances (at most 2s") {
		t.Errorf("output does not say what is drained:\n%s", out)
	}
	eventually.True(t, "no instance left", func() bool { return len(processesUsing(d.cacheDir)) == 0 })
}

// A second Ctrl-C stops at once, however long the drain could take.
func TestDevSecondInterruptStops(t *testing.T) {
	d := startDevWith(t, nil, "--drain", "1h")
	holdRequest(t, d)
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "draining", func() bool { return strings.Contains(d.out.String(), "draining 1 requests") })
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("sless dev still runs after a second Ctrl-C")
	}
	eventually.True(t, "no instance left", func() bool { return len(processesUsing(d.cacheDir)) == 0 })
}

// A database URL that does not work stops sless dev at once with an error
// naming the host, never the password.
func TestDevBadDatabaseURL(t *testing.T) {
	for _, url := range []string{"postgres://sless:s3cret@127.0.0.1:1/records", "postgres://sless:s3cret@[::1"} {
		cmd := exec.Command(os.Args[0], "dev", "--functions", t.TempDir(), "--database-url", url,
			"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), "s3cret") || !strings.Contains(string(out), "database") {
			t.Errorf("--database-url %s: %v\n%s\nwant an error about the database, without the password", url, err, out)
		}
		if strings.Contains(url, ":1/") && !strings.Contains(string(out), "127.0.0.1:1") {
			t.Errorf("the error does not name the host:\n%s", out)
		}
	}
}
