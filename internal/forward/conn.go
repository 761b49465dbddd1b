package forward

import (
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
}

// Gone is closed when the client hangs up.
func (c *Conn) Gone() <-chan struct{} { return c.gone }

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

func (c *Conn) Close() error {
	if c.unwatch != nil {
		c.unwatch()
	}
	return c.Conn.Close()
}
