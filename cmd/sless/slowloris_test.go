package main

import (
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	"sless.dev/sless/internal/badclient"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

// Slowloris: more connections than the process has file descriptors for,
// each sending its request head a byte every 100 ms, for 6 s, the ones
// closed opened again. The servers read with a timeout of 1 s, so a
// connection that lasts the whole attack was never cut; one cut late on a
// loaded machine still ends well before.
const (
	slowConns = 300
	slowEvery = 100 * time.Millisecond
	slowFor   = 6 * time.Second
)

// prlimit runs a command with a low limit of open files, set before it
// starts (util-linux's prlimit).
func prlimit(t *testing.T, nofile int) []string {
	t.Helper()
	needs.Commands(t, "prlimit") // util-linux's: the slowloris tests limit a process's open files with it
	return []string{"prlimit", "--nofile=" + strconv.Itoa(nofile)}
}

// TestDevSurvivesSlowloris: `sless dev` limited to 256 open files takes a
// slowloris of 300 connections. It sheds them (the read timeout closes
// them; those past its connection limit are answered 503 at once), keeps
// serving a client already connected, serves new ones afterwards, and
// lives. (It used to keep them all, run out of descriptors, and exit on
// "accept4: too many open files".)
func TestDevSurvivesSlowloris(t *testing.T) {
	d := startDevWith(t, prlimit(t, 256), "--read-timeout", "1s")
	cmd, exited, url := d.cmd, d.exited, d.url
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	surviveSlowloris(t, u.Host, url, exited)
	stopAndWait(t, "sless dev", cmd, exited, os.Interrupt, 30*time.Second)
}

// TestQueueProxySurvivesSlowloris is the same for `sless queue-proxy`
// limited to 128 open files.
func TestQueueProxySurvivesSlowloris(t *testing.T) {
	limit := prlimit(t, 128)
	fn := testfn.Start(t)
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, limit, append(queueProxyEnv(fn, serving, admin), "SLESS_READ_TIMEOUT_SECONDS=1"),
		"queue-proxy", "--function", "slow")
	waitStatus(t, "http://127.0.0.1:"+strconv.Itoa(admin)+"/readyz", http.StatusOK)
	addr := "127.0.0.1:" + strconv.Itoa(serving)
	surviveSlowloris(t, addr, "http://"+addr+"/echo", exited)
	stopAndWait(t, "queue-proxy", cmd, exited, os.Interrupt, 15*time.Second)
}

// surviveSlowloris runs the slowloris against addr while a client
// connected before it calls url, and checks what the server must do.
func surviveSlowloris(t *testing.T, addr, url string, exited <-chan error) {
	t.Helper()
	kept := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	call := func(c *http.Client) int {
		resp, err := c.Get(url)
		if err != nil {
			t.Errorf("GET %s: %v", url, err)
			return -1
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Logf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		return resp.StatusCode
	}
	if code := call(kept); code != 200 {
		t.Fatalf("before the slowloris: %d", code)
	}
	attack := make(chan time.Duration, 1)
	go func() { attack <- badclient.Slowloris(addr, slowConns, slowEvery, slowFor) }()
	served := 0
	for done := false; !done; {
		select {
		case longest := <-attack:
			done = true
			if longest >= slowFor-time.Second {
				t.Errorf("a slowloris connection lasted %s of the %s attack: the read timeout of 1 s never cut it", longest, slowFor)
			}
		case err := <-exited:
			t.Fatalf("the process exited under the slowloris: %v", err)
		case <-time.After(100 * time.Millisecond):
			if code := call(kept); code != 200 {
				t.Errorf("the client connected before the slowloris got %d during it, want 200", code)
			}
			served++
		}
	}
	// Every call during the attack was answered 200 (above); a few must
	// have been made, however loaded the machine, for that to mean anything.
	if served < 3 {
		t.Errorf("the connected client was served %d times in %s, want calls all through the attack", served, slowFor)
	}
	// The connections shed last may linger (up to 2 s, reading what
	// their clients still send) before their descriptors are free.
	eventually.True(t, "a new client served after the slowloris", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
