package forward

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"sless.dev/sless/internal/eventually"
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
	return serveHopH2C(t, nil)
}

// serveHopH2C is serveHop with h2c serving HTTP/2 clients, when not nil.
func serveHopH2C(t *testing.T, h2c *H2C) (addr string, logged *syncbuf.Buffer) {
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
	go func() { _ = srv.Serve(h.Listener(ln, 0, h2c)) }()
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
	frames := readFrames(t, addr)
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

// readFrames reads what the hop sends an HTTP/2 client with prior
// knowledge until it closes the connection.
func readFrames(t *testing.T, addr string) []http2.Frame {
	t.Helper()
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
			return frames // the close
		}
		frames = append(frames, f)
	}
}

// A hop whose HTTP/2 server has all the connections it may hold tells the
// next HTTP/2 client so, in HTTP/2: a GOAWAY with ENHANCE_YOUR_CALM, not a
// silent close; a connection that closes makes room for another.
func TestHTTP2BusyToldGoAway(t *testing.T) {
	h2c := NewH2C(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), 1<<20, slog.New(slog.DiscardHandler))
	h2c.maxConns = 1
	go func() { _ = h2c.Serve() }()
	t.Cleanup(func() { _ = h2c.Close() })
	addr, _ := serveHopH2C(t, h2c)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	get := func(c *http.Client) error {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if body, err := io.ReadAll(resp.Body); err != nil || resp.ProtoMajor != 2 || string(body) != "ok" {
			return fmt.Errorf("%s %q, %v", resp.Proto, body, err)
		}
		return nil
	}
	first := &http.Client{Transport: &http.Transport{Protocols: &p}}
	if err := get(first); err != nil { // its connection stays open, idle
		t.Fatal(err)
	}
	frames := readFrames(t, addr)
	if len(frames) != 2 {
		t.Fatalf("%d frames before the close, want SETTINGS and GOAWAY: %v", len(frames), frames)
	}
	if away, ok := frames[1].(*http2.GoAwayFrame); !ok || away.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(away.DebugData()), "no room") {
		t.Fatalf("second frame %v, want a GOAWAY with ENHANCE_YOUR_CALM saying why", frames[1])
	}
	first.CloseIdleConnections()
	eventually.TrueWithin(t, 30*time.Second, "the first connection counted closed", func() bool { return h2c.open.Load() == 0 })
	if err := get(&http.Client{Transport: &http.Transport{Protocols: &p}}); err != nil {
		t.Fatalf("a connection after the first closed: %v", err)
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
