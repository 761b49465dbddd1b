//go:build !linux

package forward

import (
	"context"
	"log/slog"
	"net"
)

// Hangups is a no-op where epoll is missing: requests of clients that hang
// up keep their slot until they finish or time out.
type Hangups struct{ log *slog.Logger }

func NewHangups(log *slog.Logger) (*Hangups, error) { return &Hangups{log: log}, nil }
func (h *Hangups) watch(*Conn) error                { return nil }
func (h *Hangups) Run(context.Context)              {}
func (h *Hangups) Close() error                     { return nil }

// unread cannot tell here: connections close at once.
func unread(*net.TCPConn) bool { return false }
