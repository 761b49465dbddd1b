package activator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

// AdminServer serves an activator's admin port: health, readiness,
// metrics, the admin API and the console, the records queue-proxies send
// and the autoscaler's cron fires. It is net/http, with limits of its own:
// its clients are few (people, the CLI, the autoscaler, the other
// activators, kubelet's probes) and none is on the request path, which
// the data-plane Server keeps to itself.
type AdminServer struct {
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
	Log        *slog.Logger
}

// The admin port's limits. A request head must come within
// adminReadHeaderTimeout and fit in adminMaxHeaderBytes (a bearer token
// and the console's cookie, not the megabyte net/http allows); an idle
// keep-alive connection is closed after adminIdleTimeout, longer than the
// 90 s its Go clients keep one (http.DefaultTransport), so that they close
// it first and never send on one the server is closing. There is no read
// or write timeout for the whole request: an invoke or a cron fire waits
// for the function's timeout, logs are followed for as long as the client
// wants (net/http cancels a request's context when its read deadline
// passes), and each route bounds the body it reads.
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminIdleTimeout       = 2 * time.Minute
	adminMaxHeaderBytes    = 64 << 10
)

// httpServer returns the server of the admin port; draining turns
// /readyz to 503.
func (s *AdminServer) httpServer(draining func() bool) *http.Server {
	return &http.Server{
		Handler:           s.handler(draining),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
}

// handler serves the admin routes; draining turns /readyz to 503.
func (s *AdminServer) handler(draining func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if draining() {
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
func (s *AdminServer) fire(w http.ResponseWriter, r *http.Request) {
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
func (s *AdminServer) listInvocations(w http.ResponseWriter, r *http.Request) {
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
func (s *AdminServer) summarizeInvocations(w http.ResponseWriter, r *http.Request) {
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
func (s *AdminServer) state() adminauth.State {
	if s.Guard != nil {
		return s.Guard.Load()
	}
	return adminauth.State{Token: s.Token}
}

// console serves the web console: with a Guard, ConsoleFor with the
// Guard's token of the moment (refused without one; Console, whose token
// is fixed, is not served); else Console.
func (s *AdminServer) console() http.Handler {
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
func (s *AdminServer) authorized(h http.HandlerFunc) http.Handler {
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
