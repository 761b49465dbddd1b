package forward

import (
	"net"
	"time"
)

// DefaultReadTimeout bounds how long a client may take to send a request
// head, and then each part of its body: a client that stalls (a
// slowloris, a body that never comes) is answered 408 and its connection
// closed, so that it holds neither a file descriptor nor a slot for long.
const DefaultReadTimeout = 10 * time.Second

// Accept backoff when the process is out of file descriptors, as net/http
// does: the connection waits in the kernel's backlog meanwhile.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// Listener wraps ln for a proxy hop's server: every connection is a *Conn,
// watched for hang-ups, whose client must keep sending its body within
// readTimeout (0: DefaultReadTimeout), and which h2c serves if it speaks
// HTTP/2 (nil: refused); and running out of file descriptors makes Accept
// back off and retry, instead of ending the server as fasthttp does.
func (h *Hangups) Listener(ln net.Listener, readTimeout time.Duration, h2c *H2C) net.Listener {
	if readTimeout <= 0 {
		readTimeout = DefaultReadTimeout
	}
	return &listener{Listener: ln, h: h, readTimeout: readTimeout, h2c: h2c}
}

type listener struct {
	net.Listener
	h           *Hangups
	readTimeout time.Duration
	h2c         *H2C
}

func (l *listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if backoff > 0 {
				l.h.log.Info("accepting connections again", "addr", l.Addr().String())
			}
			return l.wrap(c), nil
		}
		if !outOfResources(err) {
			return nil, err
		}
		if backoff == 0 {
			l.h.log.Warn("cannot accept connections, retrying until some close", "addr", l.Addr().String(), "err", err)
		}
		backoff = min(max(2*backoff, minAcceptBackoff), maxAcceptBackoff)
		time.Sleep(backoff)
	}
}

func (l *listener) wrap(c net.Conn) *Conn {
	cc := &Conn{Conn: c, gone: make(chan struct{}), readTimeout: l.readTimeout, h2c: l.h2c}
	if mc, ok := c.(*memConn); ok {
		// An in-memory client's close is seen as it happens: no epoll.
		mc.watchPeer(cc.hangUp)
		cc.unwatch = mc.unwatchPeer
		return cc
	}
	if err := l.h.watch(cc); err != nil {
		l.h.log.Warn("cannot watch connection for hang-ups", "err", err)
	}
	return cc
}
