package forward

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// memBuffer is how many bytes a MemListener connection holds unread in
// each direction before a write waits for the reader, as a socket's
// buffers do: a slow reader holds a fast writer back, and a body streams
// through no faster than its last hop takes it.
const memBuffer = 256 << 10

// memKeep is the most buffer a connection keeps once it has read all
// it was sent: enough for the heads and small bodies of every request.
const memKeep = 16 << 10

// memNetwork names MemListener connections in their errors.
const memNetwork = "mem"

// loopback is the address a MemListener connection's client has: a
// server sees it as it sees a client on loopback TCP (X-Forwarded-For
// gets 127.0.0.1).
var loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

// MemListener is a listener whose connections are in-memory pipes, for a
// hop whose client lives in the same process (the local platform's
// activator in front of its queue-proxies): a request crosses it with no
// socket, system call or loopback TCP stack, and the same fasthttp server
// serves it as it serves its TCP listener. Its connections behave as
// loopback TCP ones do wherever the hops depend on it:
//   - deadlines, and a deadline in the past aborting a blocked call;
//   - what the peer wrote before it closed is read, then io.EOF;
//   - a write after the peer closed is taken once (as TCP takes the one
//     that provokes the reset) and fails with EPIPE after, so a client
//     that reuses a connection the server closed reads nothing and
//     resends, as on TCP;
//   - a writer waits while memBuffer bytes are unread;
//   - a dial to a closed listener is refused (ECONNREFUSED), so the
//     request goes to another instance;
//   - wrapped by a Hangups Listener, a connection's Gone closes as soon
//     as its client closes it, as EPOLLRDHUP tells of a TCP client.
type MemListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// NewMemListener returns a listener whose Addr is addr: the TCP address
// the same server listens on, which its clients know it by.
func NewMemListener(addr net.Addr) *MemListener {
	return &MemListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Dial connects to the listener, waiting at most timeout for it to
// accept.
func (l *MemListener) Dial(timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, l.refused()
	default:
	}
	client, server := memPipe(l.addr)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, l.refused()
	case <-t.C:
		return nil, &net.OpError{Op: "dial", Net: memNetwork, Addr: l.addr, Err: os.ErrDeadlineExceeded}
	}
}

func (l *MemListener) refused() error {
	return &net.OpError{Op: "dial", Net: memNetwork, Addr: l.addr, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// Accept waits for the next connection.
func (l *MemListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, &net.OpError{Op: "accept", Net: memNetwork, Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops Accept and refuses later dials; connections accepted stay
// open.
func (l *MemListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is the address the listener was made with.
func (l *MemListener) Addr() net.Addr { return l.addr }

// memPipe returns the two ends of a connection to addr.
func memPipe(addr net.Addr) (client, server *memConn) {
	mu := &sync.Mutex{}
	client = &memConn{mu: mu, local: loopback, remote: addr,
		readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
	server = &memConn{mu: mu, local: addr, remote: loopback, peer: client,
		readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
	client.peer = server
	client.rd.mu, client.wd.mu, server.rd.mu, server.wd.mu = mu, mu, mu, mu
	return client, server
}

// memConn is one end of a MemListener connection. Both ends share one
// mutex, which guards everything but the channels.
type memConn struct {
	mu            *sync.Mutex
	peer          *memConn
	local, remote net.Addr

	in           []byte // what the peer wrote and this end has not read: in[off:]
	off          int
	closed       bool
	wroteToGone  bool // the one write taken after the peer closed
	readWaiting  bool // a Read waits for readable
	writeWaiting bool // a Write waits for writable (room in peer.in)
	rd, wd       memDeadline
	onPeerClose  func() // the server's hang-up watch

	// Signalled (without blocking) when what a waiting call waits for
	// may have come: bytes or room, or a close.
	readable, writable chan struct{}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *memConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	for {
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, c.opError("read", net.ErrClosed)
		case c.rd.passed():
			c.mu.Unlock()
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if c.off < len(c.in) {
			n := copy(p, c.in[c.off:])
			c.off += n
			if c.off == len(c.in) {
				c.in, c.off = c.in[:0], 0
				if cap(c.in) > memKeep {
					c.in = nil // a streamed body's buffer is not kept by an idle connection
				}
			}
			wake := c.peer.writeWaiting
			c.mu.Unlock()
			if wake {
				signal(c.peer.writable)
			}
			return n, nil
		}
		if c.peer.closed {
			c.mu.Unlock()
			return 0, io.EOF
		}
		c.readWaiting = true
		expired := c.rd.channel()
		c.mu.Unlock()
		select {
		case <-c.readable:
		case <-expired:
		}
		c.mu.Lock()
		c.readWaiting = false
	}
}

func (c *memConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	c.mu.Lock()
	for {
		switch {
		case c.closed:
			c.mu.Unlock()
			return n, c.opError("write", net.ErrClosed)
		case c.wd.passed():
			c.mu.Unlock()
			return n, c.opError("write", os.ErrDeadlineExceeded)
		case c.peer.closed:
			if !c.wroteToGone && n == 0 {
				c.wroteToGone = true
				c.mu.Unlock()
				return len(p), nil
			}
			c.mu.Unlock()
			return n, c.opError("write", os.NewSyscallError("write", syscall.EPIPE))
		}
		dst := c.peer
		if room := memBuffer - (len(dst.in) - dst.off); room > 0 {
			k := min(room, len(p)-n)
			if dst.off > 0 && len(dst.in)+k > cap(dst.in) {
				dst.in = dst.in[:copy(dst.in, dst.in[dst.off:])]
				dst.off = 0
			}
			dst.in = append(dst.in, p[n:n+k]...)
			n += k
			wake := dst.readWaiting
			if n == len(p) {
				c.mu.Unlock()
				if wake {
					signal(dst.readable)
				}
				return n, nil
			}
			if wake {
				signal(dst.readable)
			}
		}
		c.writeWaiting = true
		expired := c.wd.channel()
		c.mu.Unlock()
		select {
		case <-c.writable:
		case <-expired:
		}
		c.mu.Lock()
		c.writeWaiting = false
	}
}

// Close closes this end: the peer reads what was written, then io.EOF,
// and its hang-up watch, if any, runs.
func (c *memConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opError("close", net.ErrClosed)
	}
	c.closed = true
	c.in, c.off = nil, 0
	c.rd.stop()
	c.wd.stop()
	hangUp := c.peer.onPeerClose
	c.peer.onPeerClose = nil
	c.mu.Unlock()
	signal(c.readable)
	signal(c.writable)
	signal(c.peer.readable)
	signal(c.peer.writable)
	if hangUp != nil {
		hangUp()
	}
	return nil
}

// watchPeer runs hangUp once when the peer closes, at once if it has.
func (c *memConn) watchPeer(hangUp func()) {
	c.mu.Lock()
	if c.peer.closed {
		c.mu.Unlock()
		hangUp()
		return
	}
	c.onPeerClose = hangUp
	c.mu.Unlock()
}

func (c *memConn) unwatchPeer() {
	c.mu.Lock()
	c.onPeerClose = nil
	c.mu.Unlock()
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error      { return c.setDeadlines(t, &c.rd, &c.wd) }
func (c *memConn) SetReadDeadline(t time.Time) error  { return c.setDeadlines(t, &c.rd) }
func (c *memConn) SetWriteDeadline(t time.Time) error { return c.setDeadlines(t, &c.wd) }

func (c *memConn) setDeadlines(t time.Time, ds ...*memDeadline) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("set deadline", net.ErrClosed)
	}
	for _, d := range ds {
		d.set(t)
	}
	return nil
}

func (c *memConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: memNetwork, Source: c.local, Addr: c.remote, Err: err}
}

// memDeadline is one direction's deadline. Its channel is closed once the
// deadline has passed, waking the calls waiting; its timer is armed at the
// earliest deadline set since it last fired, and re-armed then for a
// deadline moved later, so that a deadline pushed forward at every request
// (a server's read timeout) costs no timer operation. Guarded by mu.
type memDeadline struct {
	mu      *sync.Mutex
	at      time.Time     // zero: none
	expired chan struct{} // closed once at has passed; nil until needed
	timer   *time.Timer
	armed   time.Time // when timer fires; zero when it is not armed
}

// closedChan stands for an expired deadline no call waited for.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

func (d *memDeadline) set(t time.Time) {
	d.at = t
	if d.passed() {
		d.expired = nil // a new channel when a call waits
	}
	switch {
	case t.IsZero():
		// An armed timer finds no deadline when it fires.
	case !d.armed.IsZero() && !t.Before(d.armed):
		// The timer fires first and re-arms for t.
	default:
		dur := time.Until(t)
		if dur <= 0 {
			d.expire()
			return
		}
		if d.timer == nil {
			d.timer = time.AfterFunc(dur, d.fire)
		} else {
			d.timer.Reset(dur)
		}
		d.armed = t
	}
}

func (d *memDeadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = time.Time{}
	if d.at.IsZero() || d.passed() {
		return
	}
	if dur := time.Until(d.at); dur > 0 {
		d.timer.Reset(dur)
		d.armed = d.at
		return
	}
	d.expire()
}

func (d *memDeadline) expire() {
	if d.expired == nil {
		d.expired = closedChan
		return
	}
	select {
	case <-d.expired:
	default:
		close(d.expired)
	}
}

func (d *memDeadline) passed() bool {
	if d.expired == nil {
		return false
	}
	select {
	case <-d.expired:
		return true
	default:
		return false
	}
}

// channel is what a waiting call selects on.
func (d *memDeadline) channel() chan struct{} {
	if d.expired == nil {
		d.expired = make(chan struct{})
	}
	return d.expired
}

func (d *memDeadline) stop() {
	if d.timer != nil {
		d.timer.Stop()
		d.armed = time.Time{}
	}
}
