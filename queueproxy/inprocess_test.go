package queueproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
)

// startInProcess runs a queue-proxy serving also on an in-memory listener,
// as the local platform runs it, and returns the listener, stop, which
// starts the drain, and wait, which returns Run's result.
func startInProcess(t *testing.T, readTimeout time.Duration) (*Server, *forward.MemListener, context.CancelFunc, func() error) {
	t.Helper()
	fn := testfn.Start(t)
	srv, err := New(Config{Namespace: "ns", Function: "fn", UserPort: fn.Port, Timeout: 10 * time.Second,
		MaxBodyBytes: 1 << 20, DrainTimeout: 10 * time.Second, ReadTimeout: readTimeout},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.QuietPeriod = 50 * time.Millisecond
	serving, admin := listen(t), listen(t)
	ml := forward.NewMemListener(serving.Addr())
	srv.InProcess = ml
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{})
	go func() { runErr = srv.Run(ctx, serving, admin); close(done) }()
	wait := func() error { <-done; return runErr }
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, "ready", srv.Ready)
	return srv, ml, cancel, wait
}

// TestInProcessServesAsTCP: the in-memory listener is served by the same
// server as the TCP one: requests are counted, a client that stalls its
// head or its body gets 408 after the read timeout, and the drain refuses
// new connections as a closed port does.
func TestInProcessServesAsTCP(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	srv, ml, stop, wait := startInProcess(t, readTimeout)
	exchange := func(request string) string {
		t.Helper()
		c, err := ml.Dial(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := resp.Read(bufio.NewReader(c)); err != nil {
			t.Fatalf("%q: %v", request, err)
		}
		return string(resp.Header.Header()) + string(resp.Body())
	}
	if got := exchange("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("in-process request: %q", got)
	}
	if n := srv.stats.Report(time.Now(), 0, 0).Requests; n != 1 {
		t.Errorf("requests counted = %d, want 1", n)
	}
	// The server's read timeouts reach in-memory connections.
	if got := exchange("GET /echo HTTP/1.1\r\nHost: x\r\n"); !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("head never finished: %q, want 408", got)
	}
	if got := exchange("POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf"); !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("body never finished: %q, want 408", got)
	}

	stop()
	eventually.True(t, "in-process dials refused while draining", func() bool {
		c, err := ml.Dial(time.Second)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if err := wait(); err != nil {
		t.Errorf("Run: %v", err)
	}
}
