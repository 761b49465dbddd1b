package forward

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is an accepted connection that learns when its client hangs up, so
// that a request waiting for a slot can leave the queue and a call in
// progress is aborted, freeing the slot at once.
type Conn struct {
	net.Conn
	gone     chan struct{} // closed on hang-up
	goneOnce sync.Once
	call     atomic.Pointer[conn] // the Client call to abort on hang-up
	unwatch  func()               // set by the watcher; runs before Close
	// readTimeout is the most a read of the client's body may wait.
	readTimeout time.Duration
	read        bool // something was read: the preface check is done
	// h2c serves the connection if it opens with the HTTP/2 preface;
	// nil, such a client is refused.
	h2c *H2C
	// handedOff is set once h2c owns the connection: fasthttp's close
	// (from its own goroutine, or its shutdown's) is then not the end.
	handedOff atomic.Bool
}

// Read reads what the client sends. The first read recognises an HTTP/2
// client, whose connection is handed over to the HTTP/2 server, or
// answered in HTTP/2 when there is none or it has no room (refuseHTTP2);
// either way fasthttp, which speaks HTTP/1.1 only (it would answer a 400
// and log the bytes), reads the connection as having ended.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read && n > 0 {
		c.read = true
		if isHTTP2Preface(p[:n]) {
			c.handOff(p[:n])
			return 0, io.EOF
		}
	}
	return n, err
}

// handOff gives the connection to the HTTP/2 server, the bytes read
// first, or refuses the client.
func (c *Conn) handOff(read []byte) {
	c.handedOff.Store(true)
	if c.h2c != nil && c.h2c.take(&handedConn{Conn: c, pending: bytes.Clone(read)}) {
		return
	}
	c.refuseHTTP2(c.h2c != nil)
	_ = c.close()
}

// Gone is closed when the client hangs up.
func (c *Conn) Gone() <-chan struct{} { return c.gone }

// NewCaller returns a Conn for a caller with no connection of its own (a
// run's attempt, which the platform sends itself): HangUp cuts its call
// short as a client's hang-up does. Its request's body must be whole
// (not streamed): there is no connection to read it from.
func NewCaller() *Conn { return &Conn{gone: make(chan struct{})} }

// HangUp ends the call under way (or the next) as the client's hang-up
// does: the instance's request is aborted, and Gone closes.
func (c *Conn) HangUp() { c.hangUp() }

func (c *Conn) hangUp() {
	c.goneOnce.Do(func() { close(c.gone) })
	if u := c.call.Load(); u != nil {
		u.abort()
	}
}

// attach makes u the call to abort on hang-up, aborting it at once if the
// client is already gone. detach undoes it.
func (c *Conn) attach(u *conn) {
	c.call.Store(u)
	select {
	case <-c.gone:
		u.abort()
	default:
	}
}

func (c *Conn) detach() { c.call.Store(nil) }

// extendRead gives the client readTimeout for its next bytes, never past
// deadline.
func (c *Conn) extendRead(deadline time.Time) {
	d := time.Now().Add(c.readTimeout)
	if d.After(deadline) {
		d = deadline
	}
	_ = c.Conn.SetReadDeadline(d)
}

// Close closes the connection, unless it was handed over to the HTTP/2
// server, which closes it.
func (c *Conn) Close() error {
	if c.handedOff.Load() {
		return nil
	}
	return c.close()
}

// close closes the connection; one whose client is still sending (a body
// the server answered before reading) lingers first, so that the client
// gets the answer.
func (c *Conn) close() error {
	if c.unwatch != nil {
		c.unwatch()
	}
	if tc, ok := c.Conn.(*net.TCPConn); ok && unread(tc) {
		select {
		case lingering <- struct{}{}:
			go func() { linger(tc); <-lingering }()
			return nil
		default: // too many linger already: this one is closed at once
		}
	}
	return c.Conn.Close()
}

// lingerFor bounds how long linger reads what a client still sends.
const lingerFor = 2 * time.Second

// lingering bounds the connections that linger at once: each keeps its
// file descriptor for up to lingerFor after the server let it go, outside
// the server's count of connections, and a flood of clients cut with
// bytes unsent (a slowloris, each connection past the limit answered 503
// and closed) would otherwise take the descriptors kept for the next hop
// (MaxConns' reservedFDs), failing the clients being served.
var lingering = make(chan struct{}, reservedFDs/4)

// linger closes tc as a server that answered before it read the request's
// body must: closed at once with bytes unread, the connection is reset,
// and the client loses the answer written just before (Linux drops what
// it received once reset; a client that writes its whole body before it
// reads, as the activator does to the queue-proxy, always would). It ends
// its writing, so that the client reads the answer and then the end, and
// reads what the client still sends, for lingerFor at most.
func linger(tc *net.TCPConn) {
	_ = tc.CloseWrite()
	_ = tc.SetReadDeadline(time.Now().Add(lingerFor))
	_, _ = io.Copy(io.Discard, tc)
	_ = tc.Close()
}
