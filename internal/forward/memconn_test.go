package forward

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

var memAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8012}

// dialMem connects a client to l and returns both ends.
func dialMem(t *testing.T, l net.Listener, ml *MemListener) (client, server net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := ml.Dial(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return client, <-accepted
}

// TestMemConnAsTCP: an in-memory connection carries bytes both ways, and
// ends as a loopback TCP one does where the hops rely on it.
func TestMemConnAsTCP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ml := NewMemListener(memAddr)
		client, server := dialMem(t, ml, ml)
		if client.RemoteAddr() != memAddr || server.LocalAddr() != memAddr {
			t.Errorf("addresses %v → %v, want the listener's", client.LocalAddr(), client.RemoteAddr())
		}
		if ip := server.RemoteAddr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			t.Errorf("server's peer %v, want a loopback client", server.RemoteAddr())
		}
		if _, err := client.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		if n, err := server.Read(buf); err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("server read %q, %v", buf[:n], err)
		}
		// What was written before a close is read, then EOF.
		if _, err := server.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		server.Close()
		if got, err := io.ReadAll(client); string(got) != "pong" || err != nil {
			t.Errorf("after the server closed: read %q, %v; want pong, then EOF", got, err)
		}
		// The first write to a closed peer is taken (a reused connection
		// then reads nothing and is resent), the next fails.
		if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Errorf("first write after the peer closed: %v, want it taken", err)
		}
		if _, err := client.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("second write after the peer closed: %v, want EPIPE", err)
		}
		client.Close()
		if _, err := client.Read(buf); !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after close: %v, want net.ErrClosed", err)
		}
	})
}

// TestMemConnDeadlines: deadlines end blocked calls, a deadline in the past
// aborts one at once (Client's abort), and moving one later keeps the call
// waiting.
func TestMemConnDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ml := NewMemListener(memAddr)
		client, server := dialMem(t, ml, ml)
		defer client.Close()
		defer server.Close()
		buf := make([]byte, 16)

		start := time.Now()
		_ = server.SetReadDeadline(start.Add(time.Second))
		_ = server.SetReadDeadline(start.Add(3 * time.Second)) // later: the first timer must not end it
		if _, err := server.Read(buf); !isTimeout(err) {
			t.Fatalf("read past its deadline: %v, want a timeout", err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("read ended after %v, want its deadline, 3s", waited)
		}
		_ = server.SetReadDeadline(time.Time{})

		// An abort from another goroutine ends a read with no deadline.
		done := make(chan error, 1)
		go func() { _, err := client.Read(buf); done <- err }()
		synctest.Wait()
		_ = client.SetDeadline(longAgo)
		if err := <-done; !isTimeout(err) {
			t.Errorf("aborted read: %v, want a timeout", err)
		}
		// A deadline lifted lets the connection serve again.
		_ = client.SetDeadline(time.Time{})
		if _, err := server.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		if n, err := client.Read(buf); err != nil || string(buf[:n]) != "ok" {
			t.Errorf("read after the deadline was lifted: %q, %v", buf[:n], err)
		}
	})
}

// TestMemConnBackpressure: a writer waits while the reader has memBuffer
// bytes unread, and everything arrives in order.
func TestMemConnBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ml := NewMemListener(memAddr)
		client, server := dialMem(t, ml, ml)
		defer client.Close()
		defer server.Close()
		body := bytes.Repeat([]byte("0123456789abcdef"), 3*memBuffer/16)
		wrote := make(chan error, 1)
		go func() { _, err := client.Write(body); wrote <- err }()
		synctest.Wait()
		select {
		case err := <-wrote:
			t.Fatalf("a write of 3×memBuffer returned (%v) with nothing read", err)
		default:
		}
		// A write deadline ends a writer that waits.
		_ = client.SetWriteDeadline(time.Now().Add(time.Second))
		if err := <-wrote; !isTimeout(err) {
			t.Fatalf("blocked write past its deadline: %v, want a timeout", err)
		}
		_ = client.SetWriteDeadline(time.Time{})
		got, err := io.ReadAll(io.LimitReader(server, memBuffer))
		if err != nil || !bytes.Equal(got, body[:memBuffer]) {
			t.Fatalf("read %d bytes (%v), want the first %d written", len(got), err, memBuffer)
		}
		go func() { _, err := client.Write(body); wrote <- err }()
		got, err = io.ReadAll(io.LimitReader(server, int64(len(body))))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("read %d bytes (%v), want the %d written", len(got), err, len(body))
		}
		if err := <-wrote; err != nil {
			t.Error(err)
		}
	})
}

// TestMemListenerClosed: a closed listener refuses dials as a closed TCP
// port does (the request can go elsewhere), and ends Accept as fasthttp
// expects of a closed listener.
func TestMemListenerClosed(t *testing.T) {
	ml := NewMemListener(memAddr)
	ml.Close()
	_, err := ml.Dial(time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial to a closed listener: %v, want ECONNREFUSED", err)
	}
	if f := Classify(dialError(err)); !f.Unsent || f.Cause != ErrRefused.Error() {
		t.Errorf("dial failure classified %+v, want unsent and refused", f)
	}
	if _, err := ml.Accept(); err == nil || !strings.Contains(err.Error(), "use of closed network connection") {
		t.Errorf("Accept on a closed listener: %v", err)
	}
}

// TestMemConnHangUp: behind a Hangups Listener, a connection learns at
// once that its in-memory client closed, and a call attached to it is
// aborted, as EPOLLRDHUP tells of a TCP client.
func TestMemConnHangUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hangups{log: slog.New(slog.DiscardHandler), conns: map[uint64]*Conn{}}
		ml := NewMemListener(memAddr)
		l := h.Listener(ml, 0, nil)
		client, server := dialMem(t, l, ml)
		cc, ok := server.(*Conn)
		if !ok {
			t.Fatalf("Accept returned a %T, want a *Conn", server)
		}
		defer cc.Close()
		// A call to the next hop, blocked reading its answer.
		upClient, upServer := memPipe(memAddr)
		defer upServer.Close()
		call := &conn{conn: upClient}
		cc.attach(call)
		readErr := make(chan error, 1)
		go func() { _, err := upClient.Read(make([]byte, 1)); readErr <- err }()
		synctest.Wait()

		client.Close()
		select {
		case <-cc.Gone():
		default:
			t.Fatal("Gone still open after the client closed")
		}
		if err := <-readErr; !isTimeout(err) || !call.aborted.Load() {
			t.Errorf("call at the next hop: %v (aborted %v), want it aborted", err, call.aborted.Load())
		}
		if len(h.conns) != 0 {
			t.Errorf("%d connections registered with epoll, want none", len(h.conns))
		}
	})
}
