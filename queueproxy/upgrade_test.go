package queueproxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
)

// A WebSocket passes the queue-proxy both ways, and holds a slot of the
// function's concurrency, counted in flight, until it closes.
func TestWebSocket(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.Concurrency = 1 })
	ws := "ws" + strings.TrimPrefix(h.url, "http") + "/ws"
	conn, resp := testfn.DialWebSocket(t, ws)
	if resp.Header.Get("Connection") != "Upgrade" || resp.Header.Get("Upgrade") != "websocket" {
		t.Errorf("101 head %v, want Connection: Upgrade, Upgrade: websocket", resp.Header)
	}
	testfn.CheckEcho(t, conn)
	if n := h.srv.inFlight(); n != 1 {
		t.Errorf("in flight with a WebSocket open = %d, want 1", n)
	}
	waiting := h.getAsync("/echo")
	eventually.True(t, "a request queued behind the WebSocket", func() bool { return h.srv.queued() == 1 })
	testfn.CloseWebSocket(t, conn)
	if code := <-waiting; code != 200 {
		t.Errorf("request queued behind the WebSocket: %d, want 200", code)
	}
	eventually.True(t, "the slot released", func() bool { return h.srv.inFlight() == 0 })
	if n := h.counter("sless_queueproxy_requests_total", "code", "101"); n != 1 {
		t.Errorf("requests_total{code=101} = %v, want 1", n)
	}
}

// Upgrades other than WebSocket are refused, but for h2c, which a client
// asks for beside an HTTP/1.1 request that is served as such; a function
// that answers 101 unasked is a bad gateway.
func TestUpgradesRefused(t *testing.T) {
	h := startProxy(t, nil)
	for _, tt := range []struct {
		upgrade string
		want    int
	}{
		{"h2c", 200},
		{"foo/2", forward.StatusUpgradeUnsupported},
		{"h2c, foo", forward.StatusUpgradeUnsupported},
	} {
		req, _ := http.NewRequest(http.MethodGet, h.url+"/echo", nil)
		req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
		req.Header.Set("Upgrade", tt.upgrade)
		req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
		resp, body := h.do(req)
		if resp.StatusCode != tt.want {
			t.Errorf("Upgrade: %s: %d %s, want %d", tt.upgrade, resp.StatusCode, body, tt.want)
			continue
		}
		if tt.want != 200 {
			if !strings.Contains(string(body), "WebSocket") {
				t.Errorf("Upgrade: %s: %s, want an error naming what passes", tt.upgrade, body)
			}
			continue
		}
		var echo testfn.Echo
		if err := json.Unmarshal(body, &echo); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"Upgrade", "Connection", "Http2-Settings"} {
			if v, ok := echo.Headers[k]; ok {
				t.Errorf("Upgrade: %s: the function got %s: %v", tt.upgrade, k, v)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, h.url+"/switch", nil)
	if resp, body := h.do(req); resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "unasked") {
		t.Errorf("101 to a plain request: %d %s, want 502 naming it", resp.StatusCode, body)
	}
}

// A draining queue-proxy keeps an open WebSocket until it closes, and
// closes it cleanly when the drain bound passes.
func TestDrainWebSocket(t *testing.T) {
	t.Run("until it closes", func(t *testing.T) {
		h := startProxy(t, nil)
		conn, _ := testfn.DialWebSocket(t, "ws"+strings.TrimPrefix(h.url, "http")+"/ws")
		preStop := h.getAsyncFrom(h.admin + wire.WaitForDrainPath) // the function container's hook
		called := time.Now()
		h.cancel()
		eventually.True(t, "/readyz 503 while draining", func() bool { r, _ := h.get(h.admin, "/readyz"); return r.StatusCode == 503 })
		testfn.CheckEcho(t, conn)
		select {
		case err := <-h.done:
			t.Fatalf("Run returned %v with a WebSocket open", err)
		case code := <-preStop:
			t.Fatalf("the preStop hook answered %d with a WebSocket open", code)
		case <-time.After(200 * time.Millisecond): // 4 quiet periods
		}
		testfn.CloseWebSocket(t, conn)
		if code := <-preStop; code != 200 || time.Since(called) < wire.MinStopDelay {
			t.Errorf("the preStop hook answered %d after %v, want 200 after the drain, and %v at least", code, time.Since(called), wire.MinStopDelay)
		}
		if err := <-h.done; err != nil {
			t.Errorf("Run after the WebSocket closed = %v, want nil", err)
		}
		h.done <- nil
	})
	t.Run("bound passes", func(t *testing.T) {
		h := startProxy(t, func(c *Config) { c.DrainTimeout = time.Second })
		conn, _ := testfn.DialWebSocket(t, "ws"+strings.TrimPrefix(h.url, "http")+"/ws")
		h.cancel()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _, err := conn.ReadMessage()
		if err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("read after the drain bound: %v, want the connection closed", err)
		}
		<-h.done
		h.done <- nil
	})
}

// A connection kept alive past its last answer's write timeout still
// switches: the activator sends a WebSocket's handshake on a pooled
// connection as on any other.
func TestWebSocketOnKeptConnection(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.ReadTimeout = time.Second })
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	roundTrip := func(head string) *http.Response {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%.20q: %v", head, err)
		}
		return resp
	}
	resp := roundTrip("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	_, _ = io.Copy(io.Discard, resp.Body)
	answered := time.Now()
	eventually.True(t, "the answer's write timeout passed", func() bool { return time.Since(answered) > 2*time.Second })
	resp = roundTrip("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake on a kept connection: %d, want 101", resp.StatusCode)
	}
}
