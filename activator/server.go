package activator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
)

// Defaults of the Server's shutdown on Kubernetes (the activator
// command's flags): config/activator's termination grace period covers
// both.
const (
	DefaultPropagationDelay = 10 * time.Second
	DefaultDrainTimeout     = 30 * time.Second
)

// Server runs an activator on its two ports, never mixed: invocations on
// one (the data plane: fasthttp, through internal/forward), and Admin on
// the other. It owns their lifecycle: readiness turns with its drain.
type Server struct {
	Activator *Activator
	// Admin serves the admin port.
	Admin AdminServer
	// DrainTimeout bounds the drain at shutdown.
	DrainTimeout time.Duration
	// PropagationDelay is how long the activator keeps taking new
	// connections after it turned unready, before it drains: the time
	// its Service's endpoints take to stop sending it any. Answers given
	// meanwhile close their connections, so that keep-alive clients
	// move to another activator.
	PropagationDelay time.Duration
	// ReadTimeout bounds how long a client may take to send a request
	// head or each part of its body (0: forward.DefaultReadTimeout).
	ReadTimeout time.Duration
	// MaxConns bounds the client connections served at once (0: as many
	// as the file descriptor limit allows, forward.MaxConns(2)).
	MaxConns int
	Log      *slog.Logger

	draining atomic.Bool
}

// Run serves until ctx ends, then turns /readyz to 503, serves on for the
// propagation delay, and drains: requests in flight finish, up to
// DrainTimeout.
func (s *Server) Run(ctx context.Context, serving, admin net.Listener) error {
	hangups, err := forward.NewHangups(s.Log)
	if err != nil {
		return err
	}
	defer hangups.Close()
	fs := forward.NewServer(s.serveHTTP, s.readError, s.Activator.cfg.MaxBodyBytes, s.ReadTimeout, s.Log)
	fs.Concurrency = s.MaxConns
	if fs.Concurrency == 0 {
		fs.Concurrency = forward.MaxConns(2)
	}
	hs := s.Admin.httpServer(s.draining.Load)
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	go hangups.Run(bg)
	go forward.SweepIdle(bg, upstreamIdleTimeout/2, s.Activator.CloseStaleConns)

	h2c := forward.NewH2C(http.HandlerFunc(s.Activator.ServeHTTP2), forward.MaxHeadBytes, s.Log)
	errc := make(chan error, 3)
	go func() { errc <- fs.Serve(hangups.Listener(serving, s.ReadTimeout, h2c)) }()
	go func() { errc <- h2c.Serve() }()
	go func() { errc <- hs.Serve(admin) }()
	s.Log.Info("activator serving", "invocations", serving.Addr().String(), "admin", admin.Addr().String())
	select {
	case err := <-errc:
		_ = fs.Shutdown()
		_ = h2c.Close()
		_ = hs.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	if s.PropagationDelay > 0 {
		s.Log.Info("unready: serving on while the endpoints change", "for", s.PropagationDelay)
		select {
		case <-time.After(s.PropagationDelay):
		case err := <-errc:
			return errors.Join(fmt.Errorf("serve: %w", err), hs.Close())
		}
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
	defer cancel()
	// WebSockets still open when the drain runs out are closed cleanly.
	context.AfterFunc(drainCtx, s.Activator.CloseSwitched)
	h2cDone := make(chan error, 1)
	go func() { h2cDone <- h2c.Shutdown(drainCtx) }() // GOAWAY: streams in flight end
	if err := errors.Join(fs.ShutdownWithContext(drainCtx), <-h2cDone); err != nil {
		s.Log.Warn("drain timed out with requests in flight", "err", err)
	}
	return hs.Close()
}

// serveHTTP is the invocation handler: once unready, each answer closes its
// connection, so that a kept-alive client reconnects to another activator
// before this one drains. Said after the answer is made: making it takes
// the instance's response head in place of the client's, and drops the
// instance's Connection field, which is no reason to close the client's.
// (Said before, it was lost: every kept-alive connection stayed to the
// end of the propagation delay, when the drain closed it idle, and the
// request a client sent on it at that moment was lost.)
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx) {
	s.Activator.ServeHTTP(ctx)
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
}

// readError answers a request that could not be read.
func (s *Server) readError(ctx *fasthttp.RequestCtx, err error) {
	code, msg := forward.ReadErrorStatus(err)
	s.Activator.fail(ctx, code, msg, nil)
}
