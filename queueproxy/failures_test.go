package queueproxy

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.dev/sless/internal/badclient"
	"sless.dev/sless/internal/forward"
)

// TestClientFaults sends what misbehaving clients send: each gets its 4xx
// (or is served, for HTTP/1.0 without a Host), and none is counted as the
// function's 502.
func TestClientFaults(t *testing.T) {
	const maxBody = 64 << 10
	h := startProxy(t, func(c *Config) { c.MaxBodyBytes, c.ReadTimeout = maxBody, 300*time.Millisecond })
	addr := strings.TrimPrefix(h.url, "http://")
	for _, c := range badclient.Cases("/echo", maxBody) {
		t.Run(c.Name, func(t *testing.T) {
			if got := badclient.Send(t, addr, c, 5*time.Second); got != c.Want {
				t.Errorf("answered %d, want %d", got, c.Want)
			}
		})
	}
	for _, code := range []string{"400", "408", "413", "431"} {
		if n := testutil.ToFloat64(h.srv.proxy.metrics.requests.WithLabelValues(code)); n == 0 {
			t.Errorf("sless_queueproxy_requests_total{code=%q} = 0: the client's fault is not counted as such", code)
		}
	}
	for _, code := range []string{"500", "502", "503", "504"} {
		if n := testutil.ToFloat64(h.srv.proxy.metrics.requests.WithLabelValues(code)); n != 0 {
			t.Errorf("sless_queueproxy_requests_total{code=%q} = %v, want 0: client faults counted against the function", code, n)
		}
	}
}

// TestRefusedIsMarkedUnsent: when the user process refuses the
// connection, the answer carries the unsent mark, so that the activator
// sends the request elsewhere; a 503 says when to retry.
func TestRefusedIsMarkedUnsent(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency, c.QueueDepth = 1, 0 })
	h.fn.Kill()
	resp, body := h.get(h.url, "/echo")
	if resp.StatusCode != 502 || resp.Header.Get(forward.UnsentHeader) == "" || !strings.Contains(string(body), "connection refused") {
		t.Errorf("refused by the user process: %d %v %s, want 502 with the unsent mark", resp.StatusCode, resp.Header, body)
	}
}

// TestForgedUnsentMark: a function that answers 502 with the unsent mark
// gets its answer to the client as it wrote it, without the mark: only
// the queue-proxy sets it, or the activator would send the request to
// another instance.
func TestForgedUnsentMark(t *testing.T) {
	h := startProxy(t, nil)
	resp, body := h.get(h.url, "/echo?status=502&header="+forward.UnsentHeader+":1")
	if resp.StatusCode != 502 || resp.Header.Get(forward.UnsentHeader) != "" || !strings.Contains(string(body), `"uri"`) {
		t.Errorf("a function's 502 with the unsent mark: %d %v %s, want its own 502 without the mark", resp.StatusCode, resp.Header, body)
	}
}
