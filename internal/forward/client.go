package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// bufferedBodyMax is the largest response body read into memory; larger
// ones, and those of unknown length, are streamed to the client.
const bufferedBodyMax = 64 << 10

// longAgo is a deadline in the past, to abort blocked reads and writes.
var longAgo = time.Unix(1, 0)

// Client is an HTTP/1.1 client to one address (a function process or a
// queue-proxy). It writes requests
// and reads responses with fasthttp's header code over keep-alive
// connections of its own, so that a call can be aborted when its client
// hangs up (fasthttp's clients cannot), bodies stream both ways, and it
// knows exactly when nothing of an answer was read.
type Client struct {
	addr        string
	idle        chan *conn // bounded pool of idle connections
	idleTimeout time.Duration
	maxBody     int64 // request body limit
	closed      atomic.Bool
	stopping    atomic.Bool // see Stopping
	// UserProcess says the next hop is a function's own process, which
	// may read a request and die of it (see resend). A queue-proxy, the
	// activator's next hop, answers whatever it read.
	UserProcess bool
	// Dial opens a connection; tests replace it.
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
}

// conn is one connection to the next hop.
type conn struct {
	u         *Client
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	aborted   atomic.Bool
	src       clientBody       // request body being forwarded
	lr        io.LimitedReader // kept here to avoid an allocation per request
	body      Body             // the response body, when streamed
}

func (c *conn) abort() {
	c.aborted.Store(true)
	_ = c.conn.SetDeadline(longAgo)
}

// NewClient returns a client to addr keeping at most maxIdle idle
// connections for idleTimeout each, and forwarding request bodies of at
// most maxBody bytes.
func NewClient(addr string, maxIdle int, idleTimeout time.Duration, maxBody int64) *Client {
	return &Client{
		addr: addr, idle: make(chan *conn, maxIdle), idleTimeout: idleTimeout, maxBody: maxBody,
		Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		},
	}
}

// Do sends req and reads resp before deadline. cc, when not nil, is the
// client's connection: the call is aborted if the client hangs up, and the
// client's body must keep coming within cc's read timeout. A request that
// may have reached the function is never sent twice, except an idempotent
// one that can be resent whose reused connection turned out closed before
// anything was read. Classify maps the error to the client's answer;
// ErrUnsent means the request is intact and may go to another instance.
//
// When the response body is streamed, Do returns its body, which holds the
// connection until the server has written the body and closed it; else nil.
func (u *Client) Do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *Conn) (*Body, error) {
	c, reused, err := u.get(deadline)
	if err != nil {
		return nil, err
	}
	body, err := u.roundTrip(c, req, resp, deadline, cc)
	if reused && errors.Is(err, ErrNothingRead) && isIdempotent(req) && resendable(req) {
		return u.resend(req, resp, deadline, cc, err)
	}
	return body, err
}

// resend sends req again on a new connection, after its reused one closed
// before anything was read (first): most often the next hop had closed it
// idle. A queue-proxy answers whatever it read, so one whose port is
// closed by then had read nothing: the request is unsent, for another
// instance. A user process may have read it and died of it: when the
// second try finds it gone, the failure is the first one, or the request
// would go to another instance to kill that one too; unless the process
// is being stopped, and went closing its idle connections (Stopping).
func (u *Client) resend(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *Conn, first error) (*Body, error) {
	c, err := u.dial(deadline)
	if err != nil {
		if u.UserProcess && !u.stopping.Load() {
			return nil, first
		}
		return nil, err
	}
	return u.roundTrip(c, req, resp, deadline, cc)
}

// Stopping tells the client that its user process is being stopped (its
// pod deleted, its instance drained): one found gone from then on most
// likely went of that, as a runtime stopping gracefully closes its idle
// connections, and a request that met a closed one is unsent. A request
// that kills the process then is sent to one more instance, rather than
// every request the stop catches failing.
func (u *Client) Stopping() { u.stopping.Store(true) }

func (u *Client) roundTrip(c *conn, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *Conn) (*Body, error) {
	if cc != nil {
		cc.attach(c)
	}
	streamed, err := c.exchange(req, resp, deadline, cc)
	if err == nil && streamed {
		c.body.cc = cc
		return &c.body, nil // detached and released when the body closes
	}
	if cc != nil {
		cc.detach()
	}
	if c.aborted.Load() {
		_ = c.conn.Close()
		return nil, ErrClientGone
	}
	if err != nil || resp.ConnectionClose() {
		_ = c.conn.Close()
		return nil, err
	}
	u.put(c)
	return nil, nil
}

func (c *conn) exchange(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, cc *Conn) (streamed bool, err error) {
	if err := c.conn.SetDeadline(deadline); err != nil {
		return false, err
	}
	// A next hop that stops taking the body (errNotTaken) may have
	// answered first (a body over its limit, a refusal): that answer,
	// not the broken write, is the request's.
	werr := c.writeRequest(req, cc, deadline)
	if werr != nil && !errors.Is(werr, errNotTaken) {
		return false, werr
	}
	if _, err := c.br.Peek(1); err != nil {
		switch {
		case werr != nil:
			return false, werr
		case isTimeout(err):
			return false, err
		}
		return false, fmt.Errorf("%w: %w", ErrNothingRead, err)
	}
	if err := readResponseHeader(&resp.Header, c.br); err != nil {
		return false, fmt.Errorf("read response: %w", err)
	}
	if werr != nil {
		resp.SetConnectionClose() // the connection is spent
	}
	if resp.StatusCode() == fasthttp.StatusBadGateway && len(resp.Header.Peek(UnsentHeader)) > 0 {
		if !c.u.UserProcess {
			return false, refused(req)
		}
		// Only a queue-proxy sets the mark: a function's own is forged,
		// to have its request sent to another instance.
		resp.Header.Del(UnsentHeader)
	}
	return c.readBody(req, resp)
}

// refused is the error of a request the next hop's function refused:
// unless its body is gone, another instance can take it.
func refused(req *fasthttp.Request) error {
	if resendable(req) {
		return &unsentError{err: ErrRefused}
	}
	return ErrRefused
}

// readBody reads the response's body, or has it streamed (streamed).
func (c *conn) readBody(req *fasthttp.Request, resp *fasthttp.Response) (streamed bool, err error) {
	code := resp.StatusCode()
	if code == fasthttp.StatusSwitchingProtocols {
		if !asksUpgrade(req) {
			return false, errUnaskedSwitch
		}
		resp.SkipBody = true
		c.body = Body{c: c, switched: true}
		return true, nil
	}
	if req.Header.IsHead() || code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified {
		resp.SkipBody = true
		return false, nil
	}
	if cl := resp.Header.ContentLength(); cl >= 0 && cl <= bufferedBodyMax {
		if err := resp.ReadBody(c.br, 0); err != nil {
			return false, fmt.Errorf("read response body: %w", err)
		}
		return false, nil
	}
	c.body.start(c, resp.Header.ContentLength(), !resp.ConnectionClose())
	resp.SetBodyStream(&c.body, resp.Header.ContentLength())
	return true, nil
}

// readResponseHeader reads the final response header, skipping interim
// 1xx responses.
func readResponseHeader(h *fasthttp.ResponseHeader, br *bufio.Reader) error {
	for range 10 {
		if err := h.Read(br); err != nil {
			return err
		}
		if code := h.StatusCode(); code < 100 || code > 199 || code == fasthttp.StatusSwitchingProtocols {
			return nil
		}
	}
	return errors.New("too many interim responses")
}

// writeRequest writes req, streaming its body when the server left it
// unread, chunked when its length is unknown, within the body limit. The
// head goes as it came, its request URI byte for byte (fasthttp's
// Request.Write would rebuild it from the parsed URI). A request without
// a Host (HTTP/1.0 allows it) is sent with the next hop's address, as
// HTTP/1.1 requires one.
func (c *conn) writeRequest(req *fasthttp.Request, cc *Conn, deadline time.Time) error {
	if len(req.Header.Host()) == 0 {
		req.Header.SetHost(c.u.addr)
	}
	stream := req.BodyStream()
	if stream == nil {
		body := req.Body()
		if len(body) > 0 {
			req.Header.SetContentLength(len(body))
		}
		if err := req.Header.Write(c.bw); err != nil {
			return fmt.Errorf("write request: %w", err)
		}
		c.bw.Write(body)
		return c.flush()
	}
	if err := req.Header.Write(c.bw); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	c.src = clientBody{r: stream, cc: cc, deadline: deadline}
	cl := int64(req.Header.ContentLength())
	if cl >= 0 {
		c.lr = io.LimitedReader{R: &c.src, N: cl}
		n, err := c.bw.ReadFrom(&c.lr)
		switch {
		case c.src.err != nil:
			return fmt.Errorf("%w: %d of %d bytes", bodyError(c.src.err), n, cl)
		case err != nil:
			// Written short because the next hop stopped reading,
			// not because the client's body did.
			return notTaken(err)
		case n < cl:
			return fmt.Errorf("%w: %d of %d bytes", bodyError(nil), n, cl)
		}
		if err := c.bw.Flush(); err != nil {
			return notTaken(err)
		}
		return nil
	}
	return c.writeChunked(&c.src)
}

// errNotTaken marks a request whose body the next hop stopped taking: it
// closed the connection, perhaps having answered first.
var errNotTaken = errors.New("forward request body")

func notTaken(err error) error { return fmt.Errorf("%w: %w", errNotTaken, err) }

// clientBody reads the client's body for the next hop. It keeps the error
// of reading it apart from those of writing it on, and gives the client
// at most its connection's read timeout for each read, and never past the
// request's deadline, so that a client that stops sending frees its slot.
type clientBody struct {
	r        io.Reader
	cc       *Conn // nil: no read timeout
	deadline time.Time
	err      error
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.cc != nil {
		b.cc.extendRead(b.deadline)
	}
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// writeChunked forwards a body of unknown length in chunks as it arrives.
func (c *conn) writeChunked(stream io.Reader) error {
	var buf [16 << 10]byte
	var sent int64
	for {
		n, err := stream.Read(buf[:])
		if n > 0 {
			if sent += int64(n); sent > c.u.maxBody {
				return ErrBodyTooLarge
			}
			c.bw.WriteString(strconv.FormatInt(int64(n), 16))
			c.bw.WriteString("\r\n")
			c.bw.Write(buf[:n])
			if _, werr := c.bw.WriteString("\r\n"); werr != nil {
				return notTaken(werr)
			}
		}
		if errors.Is(err, io.EOF) {
			c.bw.WriteString("0\r\n\r\n")
			if err := c.bw.Flush(); err != nil {
				return notTaken(err)
			}
			return nil
		}
		if err != nil {
			return bodyError(err)
		}
	}
}

func (c *conn) flush() error {
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

// Body is a response body passed to the client as it arrives from the
// function. fasthttp closes it once written (or on failure); the close
// returns the connection and runs OnClose.
type Body struct {
	c        *conn
	r        io.Reader
	chunked  bool
	reusable bool  // the connection can carry another request after the body
	finished bool  // the whole body was read
	switched bool  // the connection of a 101 answer (Switches.Carry)
	err      error // why a read failed
	cc       *Conn
	// end and idle bound the reads (Bound).
	end  time.Time
	idle time.Duration
	// OnClose, when set, runs once the body is closed: the request has
	// ended and its resources (a concurrency slot) can be released.
	OnClose func()
}

func (b *Body) start(c *conn, contentLength int, keepAlive bool) {
	*b = Body{c: c, reusable: keepAlive}
	switch {
	case contentLength >= 0:
		c.lr = io.LimitedReader{R: c.br, N: int64(contentLength)}
		b.r = &c.lr
	case contentLength == -1:
		b.r, b.chunked = httputil.NewChunkedReader(c.br), true
	default: // until the function closes the connection
		b.r, b.reusable = c.br, false
	}
}

// Bound bounds the rest of the body in time, in place of the deadline of
// the call's head: it must have ended by end, and no read waits longer
// than idle for the function's next bytes (0: end alone). A body past
// either is cut with ErrMaxDuration or ErrIdleTimeout.
func (b *Body) Bound(end time.Time, idle time.Duration) {
	b.end, b.idle = end, idle
	_ = b.c.conn.SetReadDeadline(end)
}

func (b *Body) Read(p []byte) (int, error) {
	if b.finished {
		return 0, io.EOF
	}
	if b.idle > 0 {
		// Set at every read, not once: the time the client takes to
		// read what it was sent (back-pressure) is not silence.
		d := time.Now().Add(b.idle)
		if d.After(b.end) {
			d = b.end
		}
		_ = b.c.conn.SetReadDeadline(d)
	}
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		if b.chunked {
			err = skipTrailers(b.c.br)
		}
		if err == nil || errors.Is(err, io.EOF) {
			b.finished, err = true, io.EOF
		}
	}
	if err != nil && !b.finished {
		if isTimeout(err) && !b.end.IsZero() {
			err = ErrIdleTimeout
			if !time.Now().Before(b.end) {
				err = ErrMaxDuration
			}
		}
		b.err = err
	}
	return n, err
}

// Cut reports how a body closed before its end went (ok), for the
// request's record: its client left (the call aborted, or the body closed
// unread), or the next hop failed mid-body (a timeout at the request's
// deadline, a reset, a close), mapped as Classify maps a failed call. The
// client had the head already; its answer was cut.
func (b *Body) Cut() (f Failure, ok bool) {
	switch {
	case b.finished:
		return Failure{}, false
	case b.c.aborted.Load() || b.err == nil:
		return Failure{Code: StatusClientClosedRequest, Cause: ErrClientGone.Error()}, true
	}
	return Classify(b.err), true
}

// skipTrailers reads the trailer fields after a chunked body, up to the
// blank line, so that the connection can carry the next request.
func skipTrailers(br *bufio.Reader) error {
	for range 100 {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
	return errors.New("too many trailer fields")
}

// Close returns the connection to the pool when the body was read whole
// and the function keeps it open, and ends the request.
func (b *Body) Close() error {
	c := b.c
	if b.cc != nil {
		b.cc.detach()
	}
	if b.finished && b.reusable && !c.aborted.Load() {
		c.u.put(c)
	} else {
		_ = c.conn.Close()
	}
	if b.OnClose != nil {
		b.OnClose()
	}
	return nil
}

// Addr is the address the client sends to.
func (u *Client) Addr() string { return u.addr }

func (u *Client) get(deadline time.Time) (c *conn, reused bool, err error) {
	for {
		select {
		case c := <-u.idle:
			if time.Since(c.idleSince) < u.idleTimeout {
				c.aborted.Store(false)
				return c, true, nil
			}
			_ = c.conn.Close()
		default:
			c, err := u.dial(deadline)
			return c, false, err
		}
	}
}

func (u *Client) dial(deadline time.Time) (*conn, error) {
	left := time.Until(deadline)
	if left <= 0 {
		return nil, fmt.Errorf("dial %s: %w", u.addr, os.ErrDeadlineExceeded)
	}
	nc, err := u.Dial(u.addr, left)
	if err != nil {
		return nil, dialError(err)
	}
	return &conn{u: u, conn: nc, br: bufio.NewReaderSize(nc, 4096), bw: bufio.NewWriterSize(nc, 4096)}, nil
}

func (u *Client) put(c *conn) {
	c.idleSince = time.Now()
	select {
	case u.idle <- c:
	default:
		_ = c.conn.Close()
	}
	if u.closed.Load() {
		u.CloseIdle() // Close ran meanwhile: c may be in the pool
	}
}

// CloseIdle closes the idle connections.
func (u *Client) CloseIdle() {
	for {
		select {
		case c := <-u.idle:
			_ = c.conn.Close()
		default:
			return
		}
	}
}

// CloseStale closes the connections idle for longer than the idle timeout,
// which the next hop has closed or will: a client that is not called
// would otherwise hold them.
func (u *Client) CloseStale() {
	for range len(u.idle) {
		select {
		case c := <-u.idle:
			if time.Since(c.idleSince) >= u.idleTimeout {
				_ = c.conn.Close()
				continue
			}
			select {
			case u.idle <- c:
			default:
				_ = c.conn.Close()
			}
		default:
			return
		}
	}
}

// Close closes the idle connections, and each busy one when its call
// ends: the next hop is gone. Calls still work, over new connections.
func (u *Client) Close() {
	u.closed.Store(true)
	u.CloseIdle()
}

func isIdempotent(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete() || h.IsTrace()
}

// resendable reports whether req can be sent again whole: its body is in
// memory, or it has none.
func resendable(req *fasthttp.Request) bool {
	return !req.IsBodyStream() || req.Header.ContentLength() == 0
}

// bodyError names what went wrong reading the client's body: too large,
// too slow, or malformed (short, badly chunked).
func bodyError(err error) error {
	switch {
	case err == nil:
		return ErrBadBody // it ended short
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fmt.Errorf("%w: %w", ErrBodyTooLarge, err)
	case isTimeout(err):
		return fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrBadBody, err)
}

// SweepIdle calls closeStale (a Client's CloseStale, or a loop over
// several) every d until ctx ends: idle connections are otherwise closed
// only by the client's next call, which may never come.
func SweepIdle(ctx context.Context, d time.Duration, closeStale func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			closeStale()
		}
	}
}
