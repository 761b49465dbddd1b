package queueproxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Errors of a call to the user process, beyond the network's own.
var (
	// errClientGone means the client hung up and the call was aborted.
	errClientGone = errors.New("client closed the connection")
	// errNothingRead means the connection closed before any byte of a
	// response: on a reused connection, the function had closed it idle.
	errNothingRead = errors.New("function closed the connection before responding")
)

// longAgo is a deadline in the past, to abort blocked reads and writes.
var longAgo = time.Unix(1, 0)

// upstream is the HTTP/1.1 client to the user process. It is fasthttp's
// request writer and response reader over keep-alive connections of its
// own, so that a call can be aborted when its client hangs up, something
// fasthttp's clients cannot do.
type upstream struct {
	addr        string
	idle        chan *upConn // bounded pool of idle connections
	idleTimeout time.Duration
	dialer      func(addr string, timeout time.Duration) (net.Conn, error)
}

// upConn is one connection to the user process.
type upConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	aborted   atomic.Bool
}

func (c *upConn) abort() {
	c.aborted.Store(true)
	_ = c.conn.SetDeadline(longAgo)
}

func newUpstream(addr string, maxIdle int, idleTimeout time.Duration) *upstream {
	return &upstream{addr: addr, idle: make(chan *upConn, maxIdle), idleTimeout: idleTimeout,
		dialer: func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		}}
}

// do sends req and reads resp before deadline. cc, when not nil, aborts
// the call if its client hangs up. A request that may have reached the
// function is never sent twice, except an idempotent one whose reused
// connection turned out closed before anything was read.
func (u *upstream) do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *clientConn) error {
	c, reused, err := u.get(deadline)
	if err != nil {
		return err
	}
	err = u.roundTrip(c, req, resp, deadline, cc)
	if reused && errors.Is(err, errNothingRead) && isIdempotent(req) {
		if c, err = u.dial(deadline); err != nil {
			return err
		}
		err = u.roundTrip(c, req, resp, deadline, cc)
	}
	return err
}

func (u *upstream) roundTrip(c *upConn, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *clientConn) error {
	if cc != nil {
		cc.attach(c)
		defer cc.detach()
	}
	err := c.exchange(req, resp, deadline)
	if c.aborted.Load() {
		_ = c.conn.Close()
		return errClientGone
	}
	if err != nil || resp.ConnectionClose() {
		_ = c.conn.Close()
		return err
	}
	u.put(c)
	return nil
}

func (c *upConn) exchange(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	if err := c.conn.SetDeadline(deadline); err != nil {
		return err
	}
	if err := req.Write(c.bw); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if _, err := c.br.Peek(1); err != nil {
		if isTimeout(err) {
			return err
		}
		return fmt.Errorf("%w: %w", errNothingRead, err)
	}
	resp.SkipBody = req.Header.IsHead()
	if err := resp.Read(c.br); err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	return nil
}

func (u *upstream) get(deadline time.Time) (c *upConn, reused bool, err error) {
	for {
		select {
		case c := <-u.idle:
			if time.Since(c.idleSince) < u.idleTimeout {
				return c, true, nil
			}
			_ = c.conn.Close()
		default:
			c, err := u.dial(deadline)
			return c, false, err
		}
	}
}

func (u *upstream) dial(deadline time.Time) (*upConn, error) {
	left := time.Until(deadline)
	if left <= 0 {
		return nil, fmt.Errorf("dial %s: %w", u.addr, os.ErrDeadlineExceeded)
	}
	conn, err := u.dialer(u.addr, left)
	if err != nil {
		return nil, err
	}
	return &upConn{conn: conn, br: bufio.NewReaderSize(conn, 4096), bw: bufio.NewWriterSize(conn, 4096)}, nil
}

func (u *upstream) put(c *upConn) {
	c.idleSince = time.Now()
	select {
	case u.idle <- c:
	default:
		_ = c.conn.Close()
	}
}

// close closes the idle connections.
func (u *upstream) close() {
	for {
		select {
		case c := <-u.idle:
			_ = c.conn.Close()
		default:
			return
		}
	}
}

func isIdempotent(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete() || h.IsTrace()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
