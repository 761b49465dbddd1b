package forward

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
)

// exhausted is a listener out of file descriptors for its first accepts,
// as a process at its RLIMIT_NOFILE is.
type exhausted struct {
	net.Listener
	failures int
	err      error
}

func (l *exhausted) Accept() (net.Conn, error) {
	if l.failures > 0 {
		l.failures--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", l.err)}
	}
	return l.Listener.Accept()
}

// TestListenerSurvivesEMFILE: Accept backs off while the process is out
// of file descriptors and returns the next connection, where fasthttp
// would end its server; other errors end it.
func TestListenerSurvivesEMFILE(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hangups{log: slog.New(slog.DiscardHandler), conns: map[uint64]*Conn{}}
		ln, peer := newPipeListener()
		l := h.Listener(&exhausted{Listener: ln, failures: 5, err: syscall.EMFILE}, 0, nil)
		go peer()
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("Accept after EMFILE = %v, want the next connection", err)
		}
		if _, ok := c.(*Conn); !ok {
			t.Errorf("Accept returned a %T, want a *Conn", c)
		}
		c.Close()

		bad := h.Listener(&exhausted{Listener: ln, failures: 1, err: syscall.EINVAL}, 0, nil)
		if _, err := bad.Accept(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Accept on EINVAL = %v, want the error", err)
		}
	})
}

// pipeListener hands out the server ends of in-memory pipes.
type pipeListener struct{ conns chan net.Conn }

func newPipeListener() (*pipeListener, func()) {
	l := &pipeListener{conns: make(chan net.Conn, 1)}
	return l, func() {
		server, client := net.Pipe()
		defer client.Close()
		l.conns <- server
	}
}

func (l *pipeListener) Accept() (net.Conn, error) { return <-l.conns, nil }
func (l *pipeListener) Close() error              { return nil }
func (l *pipeListener) Addr() net.Addr            { return &net.TCPAddr{} }
