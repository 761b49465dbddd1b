//go:build !linux

package queueproxy

import (
	"context"
	"log/slog"
	"net"
)

// hangups is a no-op where epoll is missing: requests of clients that hang
// up keep their slot until they finish or time out.
type hangups struct{}

func newHangups(*slog.Logger) (*hangups, error)          { return &hangups{}, nil }
func (h *hangups) listener(ln net.Listener) net.Listener { return ln }
func (h *hangups) run(context.Context)                   {}
func (h *hangups) close() error                          { return nil }
