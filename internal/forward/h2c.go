package forward

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// H2C serves the connections of a hop's listener that open with the
// HTTP/2 preface (h2c with prior knowledge, what gRPC clients and curl
// --http2-prior-knowledge send) with net/http's HTTP/2 server, while
// fasthttp, which speaks HTTP/1.1 only, serves the others on the same
// port. The preface is recognised on a connection's first read
// (Conn.Read), a read HTTP/1.1 does anyway: its path gains no goroutine,
// copy or peek.
type H2C struct {
	srv *http.Server
	ln  *handOffListener
	// open counts the connections taken and not yet closed: fasthttp's
	// bound on connections no longer counts them once handed over.
	open atomic.Int64
	// maxConns bounds open: maxH2CConns (tests lower it).
	maxConns int64
}

// maxH2CConns bounds the HTTP/2 connections of one hop; each carries up
// to h2cMaxStreams requests at once.
const (
	maxH2CConns   = 1024
	h2cMaxStreams = 250
	// h2cIdleTimeout closes an HTTP/2 connection without streams, as
	// fasthttp's idle timeout closes a kept-alive HTTP/1.1 one.
	h2cIdleTimeout = 90 * time.Second
)

// NewH2C returns an HTTP/2 server for h. Its requests' heads are bounded
// by maxHeaderBytes, as fasthttp's are by its read buffer.
func NewH2C(h http.Handler, maxHeaderBytes int, log *slog.Logger) *H2C {
	s := &H2C{ln: &handOffListener{conns: make(chan net.Conn, 64), done: make(chan struct{})}, maxConns: maxH2CConns}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Handler:        h,
		Protocols:      &protocols,
		MaxHeaderBytes: maxHeaderBytes,
		IdleTimeout:    h2cIdleTimeout,
		HTTP2:          &http.HTTP2Config{MaxConcurrentStreams: h2cMaxStreams},
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateClosed || state == http.StateHijacked {
				s.open.Add(-1)
			}
		},
	}
	return s
}

// Serve serves the connections handed over until Shutdown.
func (s *H2C) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown tells every client to open no new stream (GOAWAY) and waits
// for the streams in flight to end; when ctx ends first, the connections
// are closed.
func (s *H2C) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	for { // handed over as the server stopped accepting
		select {
		case c := <-s.ln.conns:
			_ = c.Close()
		default:
			return err
		}
	}
}

// Close closes every connection at once.
func (s *H2C) Close() error { return s.srv.Close() }

// take hands c over, the bytes already read from it first; false when
// the server is shutting down or has too many connections already.
func (s *H2C) take(c net.Conn) bool {
	if s.open.Add(1) > s.maxConns {
		s.open.Add(-1)
		return false
	}
	select {
	case s.ln.conns <- c:
		return true
	case <-s.ln.done:
	default: // the server is not accepting fast enough: refused, not queued
	}
	s.open.Add(-1)
	return false
}

// handOffListener is what the HTTP/2 server accepts from: the
// connections fasthttp's listener handed over.
type handOffListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *handOffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handOffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handOffListener) Addr() net.Addr { return handOffAddr{} }

type handOffAddr struct{}

func (handOffAddr) Network() string { return "h2c" }
func (handOffAddr) String() string  { return "handed-over" }

// handedConn is a connection handed over to the HTTP/2 server: it reads
// the bytes fasthttp's read took first, and its close is the real one.
type handedConn struct {
	*Conn
	pending []byte
}

func (c *handedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Conn.Read(p)
}

func (c *handedConn) Close() error { return c.Conn.close() }
