package queueproxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// clientConn is an accepted connection that learns when its client hangs
// up, so that a request waiting for a slot leaves the queue and a request
// at the user process has its call aborted, freeing the slot at once.
type clientConn struct {
	net.Conn
	gone     chan struct{} // closed on hang-up
	goneOnce sync.Once
	call     atomic.Pointer[upConn] // the upstream call to abort on hang-up
	unwatch  func()                 // set by the watcher; runs before Close
}

func (c *clientConn) hangUp() {
	c.goneOnce.Do(func() { close(c.gone) })
	if u := c.call.Load(); u != nil {
		u.abort()
	}
}

// attach makes u the call to abort on hang-up, aborting it at once if the
// client is already gone. detach undoes it.
func (c *clientConn) attach(u *upConn) {
	c.call.Store(u)
	select {
	case <-c.gone:
		u.abort()
	default:
	}
}

func (c *clientConn) detach() { c.call.Store(nil) }

func (c *clientConn) Close() error {
	if c.unwatch != nil {
		c.unwatch()
	}
	return c.Conn.Close()
}
