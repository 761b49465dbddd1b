package forward

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// lockedBuffer is a log's output, read while the server writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// serveHop runs a hop's server (NewServer on a Hangups Listener) that
// answers "ok", logging into the returned buffer.
func serveHop(t *testing.T) (addr string, logged *lockedBuffer) {
	t.Helper()
	logged = &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logged, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHangups(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go h.Run(ctx)
	srv := NewServer(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }, func(ctx *fasthttp.RequestCtx, err error) {
		code, msg := ReadErrorStatus(err)
		WriteError(ctx, code, []byte(msg))
	}, 1<<20, 0, log)
	go func() { _ = srv.Serve(h.Listener(ln, 0)) }()
	t.Cleanup(func() { _ = srv.Shutdown(); cancel(); _ = h.Close() })
	return ln.Addr().String(), logged
}

// An HTTP/2 client with prior knowledge (h2c, as gRPC's) is told in
// HTTP/2 that the hop speaks HTTP/1.1 (GOAWAY, HTTP_1_1_REQUIRED), rather
// than a silent close or an HTTP/1.1 answer it cannot read; nothing of
// its bytes reaches the log, and the hop serves HTTP/1.1 on.
func TestHTTP2ClientToldGoAway(t *testing.T) {
	addr, logged := serveHop(t)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true) // with prior knowledge, as gRPC's clients
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}, Timeout: 30 * time.Second}
	_, err := client.Get("http://" + addr + "/")
	if err == nil || !strings.Contains(err.Error(), "HTTP_1_1_REQUIRED") {
		t.Fatalf("an HTTP/2 request: %v, want a GOAWAY with HTTP_1_1_REQUIRED", err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an HTTP/1.1 request after: %v", err)
	}
	resp.Body.Close()
	if out := strings.Join(logged.lines(), "\n"); strings.Contains(out, "PRI") {
		t.Errorf("the log quotes the HTTP/2 client:\n%s", out)
	}
}

// What fasthttp logs of requests it cannot read is bounded: a line's
// first bytes, and a line a second, however many clients send garbage.
func TestUnreadableRequestsLogBounded(t *testing.T) {
	addr, logged := serveHop(t)
	garbage := append([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), bytes.Repeat([]byte{'x'}, 4000)...)
	garbage = append(garbage, "\r\n\r\n"...) // a TLS hello's start, as a head
	start := time.Now()
	for range 50 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(garbage)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.ReadAll(c) // the 400, then the close
		c.Close()
	}
	lines := logged.lines()
	if most := 1 + int(time.Since(start)/time.Second); len(lines) > most || len(lines) == 0 {
		t.Errorf("%d lines logged for 50 unreadable requests in %v, want 1 to %d", len(lines), time.Since(start), most)
	}
	for _, l := range lines {
		if len(l) > 2*maxLogLine {
			t.Errorf("a line of %d bytes logged, want it cut near %d: %.300s", len(l), maxLogLine, l)
		}
	}
}
