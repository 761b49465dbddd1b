package forward

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// BenchmarkHop is one round trip through a hop: a Client, a connection
// and a proxy hop's fasthttp server (NewServer behind a Hangups Listener)
// answering at once, over loopback TCP, over a MemListener, and over
// fasthttp's own in-memory listener for comparison.
func BenchmarkHop(b *testing.B) {
	for _, kind := range []string{"tcp", "mem", "fasthttputil"} {
		b.Run(kind, func(b *testing.B) {
			var ln net.Listener
			var dial func(string, time.Duration) (net.Conn, error)
			switch kind {
			case "tcp":
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				ln, dial = l, func(addr string, timeout time.Duration) (net.Conn, error) {
					return net.DialTimeout("tcp", addr, timeout)
				}
			case "mem":
				ml := NewMemListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1})
				ln, dial = ml, func(_ string, timeout time.Duration) (net.Conn, error) { return ml.Dial(timeout) }
			default:
				fl := fasthttputil.NewInmemoryListener()
				ln, dial = fl, func(string, time.Duration) (net.Conn, error) { return fl.Dial() }
			}
			log := slog.New(slog.DiscardHandler)
			h, err := NewHangups(log)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			srv := NewServer(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("hello") }, nil, 1<<20, 0, log)
			go func() { _ = srv.Serve(h.Listener(ln, 0, nil)) }()
			defer func() { _ = srv.Shutdown() }()
			c := NewClient(ln.Addr().String(), 4, time.Minute, 1<<20)
			c.Dial = dial
			defer c.CloseIdle()
			var req fasthttp.Request
			var resp fasthttp.Response
			b.ReportAllocs()
			for b.Loop() {
				req.SetRequestURI("http://fn.local/hello")
				resp.Reset()
				if _, err := c.Do(&req, &resp, time.Now().Add(time.Minute), nil); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%d %v", resp.StatusCode(), err)
				}
			}
		})
	}
}
