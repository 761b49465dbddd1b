package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Hangups tells requests when their client hangs up. fasthttp does not
// read a connection while its handler runs, so it cannot notice; instead
// every accepted connection is registered once, for EPOLLRDHUP, with an
// epoll instance that one goroutine waits on. The request path only reads
// the connection's channel: no syscall, lock or goroutine per request.
type Hangups struct {
	epfd  int
	log   *slog.Logger
	mu    sync.Mutex
	conns map[uint64]*Conn
	next  uint64
}

func NewHangups(log *slog.Logger) (*Hangups, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	return &Hangups{epfd: epfd, log: log, conns: map[uint64]*Conn{}}, nil
}

func (h *Hangups) watch(cc *Conn) error {
	sc, ok := cc.Conn.(syscall.Conn)
	if !ok {
		return errors.New("connection has no file descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.next++
	id := h.next
	h.conns[id] = cc
	h.mu.Unlock()
	var ctlErr error
	err = raw.Control(func(fd uintptr) {
		// Fd and Pad together are epoll_data: they carry the id.
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		ctlErr = unix.EpollCtl(h.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
		if ctlErr == nil {
			cc.unwatch = func() {
				h.mu.Lock()
				delete(h.conns, id)
				h.mu.Unlock()
				_ = unix.EpollCtl(h.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
			}
		}
	})
	if err = errors.Join(err, ctlErr); err != nil {
		h.mu.Lock()
		delete(h.conns, id)
		h.mu.Unlock()
	}
	return err
}

// Run waits for hang-ups until ctx ends.
func (h *Hangups) Run(ctx context.Context) {
	events := make([]unix.EpollEvent, 64)
	for ctx.Err() == nil {
		n, err := unix.EpollWait(h.epfd, events, 200)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			h.log.Error("epoll_wait", "err", err)
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			h.mu.Lock()
			cc := h.conns[id]
			h.mu.Unlock()
			if cc != nil {
				cc.hangUp()
			}
		}
	}
}

func (h *Hangups) Close() error { return unix.Close(h.epfd) }

// unread reports whether bytes the client sent wait unread on tc.
func unread(tc *net.TCPConn) bool {
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
