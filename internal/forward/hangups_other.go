//go:build !linux

package forward

import (
	"context"
	"log/slog"
	"net"
)

// Hangups is a no-op where epoll is missing: requests of clients that hang
// up keep their slot until they finish or time out.
type Hangups struct{}

func NewHangups(*slog.Logger) (*Hangups, error)          { return &Hangups{}, nil }
func (h *Hangups) Listener(ln net.Listener) net.Listener { return ln }
func (h *Hangups) Run(context.Context)                   {}
func (h *Hangups) Close() error                          { return nil }
