package activator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

// Defaults of the Server's shutdown on Kubernetes (the activator
// command's flags): config/activator's termination grace period covers
// both.
const (
	DefaultPropagationDelay = 10 * time.Second
	DefaultDrainTimeout     = 30 * time.Second
)

// Server runs an activator on its two ports: invocations on one, health,
// metrics and the admin API on the other, never mixed.
type Server struct {
	Activator *Activator
	// Registry is served on /metrics.
	Registry prometheus.Gatherer
	// Records answers each function's invocations and their summary.
	Records RecordReader
	// Token, when set, is the bearer token the /v1/ API requires (fixed:
	// `sless dev`, or SLESS_ADMIN_TOKEN).
	Token string
	// Guard, when set, replaces Token: the token of the moment, which
	// the watch of its Secret swaps in place, or why there is none, in
	// which case every admin route but /metrics, /healthz and /readyz
	// answers 503 (the activator on Kubernetes).
	Guard *adminauth.Guard
	// AcceptRecords serves wire.RecordsPattern, where queue-proxies on
	// other hosts send their records (Kubernetes); the local platform's
	// are in process.
	AcceptRecords bool
	// API, when set, serves every /v1/ route but the invocations', behind
	// the token, in place of the activator's own list of functions: the
	// admin API (adminapi) of the local platform or of the cluster.
	API http.Handler
	// Console, when set, serves the web console on every path the
	// other routes leave: it guards its own pages and login.
	Console http.Handler
	// ConsoleFor, with Guard, is the console for the token the Guard
	// holds at each request (the token changes when its Secret is
	// rotated); with a Guard, Console is not served.
	ConsoleFor func(token string) http.Handler
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
	hs := &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	go hangups.Run(bg)
	go forward.SweepIdle(bg, upstreamIdleTimeout/2, s.Activator.CloseStaleConns)

	errc := make(chan error, 2)
	go func() { errc <- fs.Serve(hangups.Listener(serving, s.ReadTimeout)) }()
	go func() { errc <- hs.Serve(admin) }()
	s.Log.Info("activator serving", "invocations", serving.Addr().String(), "admin", admin.Addr().String())
	select {
	case err := <-errc:
		_ = fs.Shutdown()
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
	if err := fs.ShutdownWithContext(drainCtx); err != nil {
		s.Log.Warn("drain timed out with requests in flight", "err", err)
	}
	return hs.Close()
}

// serveHTTP is the invocation handler: once unready, each answer closes its
// connection.
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
	s.Activator.ServeHTTP(ctx)
}

// readError answers a request that could not be read.
func (s *Server) readError(ctx *fasthttp.RequestCtx, err error) {
	code, msg := forward.ReadErrorStatus(err)
	s.Activator.fail(ctx, code, msg, nil)
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	if console := s.console(); console != nil {
		mux.Handle("/", console)
	}
	if s.API != nil {
		mux.Handle("/v1/", s.authorized(s.API.ServeHTTP))
	} else {
		mux.Handle("GET /v1/functions", s.authorized(func(w http.ResponseWriter, _ *http.Request) {
			httpjson.Write(w, http.StatusOK, map[string]any{"functions": s.Activator.Functions()})
		}))
	}
	mux.Handle(wire.FirePattern, s.authorized(s.fire))
	if s.AcceptRecords {
		// Vouched for by the instance's address, not the token, which a
		// queue-proxy in a user's namespace cannot read: served while
		// the admin API is refused too.
		mux.HandleFunc(wire.RecordsPattern, s.addRecords)
	}
	mux.Handle("GET "+invocationsRoute, s.authorized(s.listInvocations))
	mux.Handle("GET "+invocationsRoute+"/summary", s.authorized(s.summarizeInvocations))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.AdminAPIHeader, wire.AdminAPIVersion)
		mux.ServeHTTP(w, r)
	})
}

// maxFireBody bounds a fire's body: a cron trigger's body is at most 64 KiB.
const maxFireBody = 64 << 10

// fire sends a cron fire for the autoscaler's scheduler (wire.FirePattern).
func (s *Server) fire(w http.ResponseWriter, r *http.Request) {
	scheduled, err := time.Parse(time.RFC3339Nano, r.Header.Get(wire.ScheduledTimeHeader))
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, wire.ScheduledTimeHeader+": not an RFC 3339 time")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFireBody))
	if err != nil {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a fire's body is at most %d bytes", maxFireBody))
		return
	}
	code, err := s.Activator.Fire(r.Context(), r.PathValue("namespace"), r.PathValue("name"), r.PathValue("trigger"), scheduled, body)
	switch {
	case errors.Is(err, ErrNotFireable):
		httpjson.Error(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		httpjson.Error(w, http.StatusNotFound, err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]int{"status": code})
}

// RecordReader answers the invocation routes: the in-memory ring or the
// PostgreSQL store, with the same answers.
type RecordReader interface {
	List(ctx context.Context, q invocation.Query) (invocation.Page, error)
	Summary(ctx context.Context, namespace, function string, since time.Time) (invocation.Summary, error)
}

// invocationsRoute is the admin API's path of a function's invocations.
const invocationsRoute = "/v1/namespaces/{namespace}/functions/{name}/invocations"

// listInvocations answers a page of a function's invocations, newest
// first: ?limit=&before=&since=&status=&trigger=.
func (s *Server) listInvocations(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	page, err := s.Records.List(r.Context(), q)
	if err != nil {
		s.Log.Warn("list invocations", "namespace", q.Namespace, "function", q.Function, "err", err)
		httpjson.Error(w, http.StatusServiceUnavailable, "invocation records unavailable: "+err.Error())
		return
	}
	if page.Invocations == nil {
		page.Invocations = []invocation.Record{}
	}
	httpjson.Write(w, http.StatusOK, page)
}

func parseQuery(r *http.Request) (invocation.Query, error) {
	v := r.URL.Query()
	q := invocation.Query{Namespace: r.PathValue("namespace"), Function: r.PathValue("name"), Trigger: v.Get("trigger")}
	var err error
	if l := v.Get("limit"); l != "" {
		if q.Limit, err = strconv.Atoi(l); err != nil || q.Limit < 1 || q.Limit > invocation.MaxLimit {
			return q, fmt.Errorf("limit must be a whole number from 1 to %d", invocation.MaxLimit)
		}
	}
	if b := v.Get("before"); b != "" {
		c, err := invocation.ParseCursor(b)
		if err != nil {
			return q, err
		}
		q.Before = &c
	}
	if since := v.Get("since"); since != "" {
		if q.Since, err = invocation.ParseSince(since, time.Now()); err != nil {
			return q, err
		}
	}
	if st := v.Get("status"); st != "" {
		if q.Status, err = strconv.Atoi(st); err != nil || q.Status < 100 || q.Status > 599 {
			return q, errors.New("status must be an HTTP status code")
		}
	}
	switch q.Trigger {
	case "", "http", "cron", "rabbitmq":
	default:
		return q, fmt.Errorf("trigger must be http, cron or rabbitmq, not %q", q.Trigger)
	}
	return q, nil
}

// summarizeInvocations answers how a function did over ?window= (1h).
func (s *Server) summarizeInvocations(w http.ResponseWriter, r *http.Request) {
	window, err := invocation.ParseWindow(r.URL.Query().Get("window"))
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	sum, err := s.Records.Summary(r.Context(), ns, name, time.Now().Add(-window))
	if err != nil {
		s.Log.Warn("summarize invocations", "namespace", ns, "function", name, "err", err)
		httpjson.Error(w, http.StatusServiceUnavailable, "invocation records unavailable: "+err.Error())
		return
	}
	sum.Window = cmp.Or(r.URL.Query().Get("window"), "1h")
	httpjson.Write(w, http.StatusOK, sum)
}

// state is what guards the admin API for one request: the Guard's token
// of the moment, or the fixed Token.
func (s *Server) state() adminauth.State {
	if s.Guard != nil {
		return s.Guard.Load()
	}
	return adminauth.State{Token: s.Token}
}

// console serves the web console: with a Guard, ConsoleFor with the
// Guard's token of the moment (refused without one; Console, whose token
// is fixed, is not served); else Console.
func (s *Server) console() http.Handler {
	switch {
	case s.Guard == nil:
		return s.Console
	case s.ConsoleFor == nil:
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.Guard.Load()
		if st.Refused != "" {
			refuse(w, st)
			return
		}
		s.ConsoleFor(st.Token).ServeHTTP(w, r)
	})
}

// refuse answers a request for the admin API while no token can be had.
func refuse(w http.ResponseWriter, st adminauth.State) {
	httpjson.Error(w, http.StatusServiceUnavailable, st.Refused)
}

// authorized requires the admin token, when one is configured: as a
// bearer token, or the console's session cookie. Without one to require
// on Kubernetes (Guard refuses), it answers 503: never open.
func (s *Server) authorized(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.state()
		switch st.Check(r) {
		case adminauth.Refused:
			refuse(w, st)
		case adminauth.Missing:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sless"`)
			httpjson.Error(w, http.StatusUnauthorized, "a bearer token is required")
		case adminauth.Forged:
			httpjson.Error(w, http.StatusForbidden, "a change made with the session cookie must send a JSON body")
		default:
			h(w, r)
		}
	})
}
