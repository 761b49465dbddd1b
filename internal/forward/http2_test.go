package forward

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"sless.dev/sless/internal/syncbuf"
)

// logLines are the lines of a log written so far.
func logLines(b *syncbuf.Buffer) []string {
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

// serveHop runs a hop's server (NewServer on a Hangups Listener) that
// answers "ok", logging into the returned buffer.
func serveHop(t *testing.T) (addr string, logged *syncbuf.Buffer) {
	t.Helper()
	logged = &syncbuf.Buffer{}
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
	go func() { _ = srv.Serve(h.Listener(ln, 0, nil)) }()
	t.Cleanup(func() { _ = srv.Shutdown(); cancel(); _ = h.Close() })
	return ln.Addr().String(), logged
}

// An HTTP/2 client with prior knowledge (h2c, as gRPC's) is told in
// HTTP/2 that the hop speaks HTTP/1.1: the server's preface (SETTINGS)
// and a GOAWAY with HTTP_1_1_REQUIRED saying why, read with x/net's frame
// parser, rather than a silent close or an HTTP/1.1 answer it cannot
// read; nothing of its bytes reaches the log, and the hop serves HTTP/1.1
// on.
func TestHTTP2ClientToldGoAway(t *testing.T) {
	addr, logged := serveHop(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	framer := http2.NewFramer(conn, conn)
	if err := framer.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var frames []http2.Frame
	for {
		f, err := framer.ReadFrame()
		if err != nil {
			break // the close
		}
		frames = append(frames, f)
	}
	if len(frames) != 2 {
		t.Fatalf("%d frames before the close, want SETTINGS and GOAWAY: %v", len(frames), frames)
	}
	if _, ok := frames[0].(*http2.SettingsFrame); !ok {
		t.Errorf("first frame %v, want the server's SETTINGS", frames[0])
	}
	away, ok := frames[1].(*http2.GoAwayFrame)
	if !ok || away.ErrCode != http2.ErrCodeHTTP11Required || !strings.Contains(string(away.DebugData()), "HTTP/1.1 only") {
		t.Fatalf("second frame %v, want a GOAWAY with HTTP_1_1_REQUIRED saying why", frames[1])
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an HTTP/1.1 request after: %v", err)
	}
	resp.Body.Close()
	if out := logged.String(); strings.Contains(out, "PRI") {
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
	lines := logLines(logged)
	if most := 1 + int(time.Since(start)/time.Second); len(lines) > most || len(lines) == 0 {
		t.Errorf("%d lines logged for 50 unreadable requests in %v, want 1 to %d", len(lines), time.Since(start), most)
	}
	for _, l := range lines {
		if len(l) > 2*maxLogLine {
			t.Errorf("a line of %d bytes logged, want it cut near %d: %.300s", len(l), maxLogLine, l)
		}
	}
}
