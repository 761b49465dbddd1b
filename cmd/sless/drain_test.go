package main

import (
	"net/http"
	"os"
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
