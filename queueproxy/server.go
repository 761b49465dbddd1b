// Package queueproxy is the sidecar in front of every function instance: it
// enforces the function's concurrency limit and timeout on the request path,
// tells the platform when the instance is ready, keeps the time-weighted
// concurrency the autoscaler scales on, exposes Prometheus metrics, and
// drains in-flight requests on shutdown.
package queueproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy/consumer"
)

// DefaultQuietPeriod is how long a draining queue-proxy waits without a new
// request before it stops listening: the time the activator needs to see
// the instance is no longer ready.
const DefaultQuietPeriod = time.Second

// maxConnections bounds the client connections served at once, and so the
// goroutines and the connections to the user process.
const maxConnections = 10_000

// Server is one queue-proxy: the proxy on the serving port and the admin
// endpoints, with readiness probing and drain.
type Server struct {
	cfg      Config
	log      *slog.Logger
	proxy    *proxy
	stats    *Stats
	registry *prometheus.Registry // the instance's series
	runtime  *prometheus.Registry // the Go runtime's and the process's
	prober   *prober
	draining atomic.Bool
	drained  chan struct{} // closed when the drain has ended

	// QuietPeriod overrides DefaultQuietPeriod when set before Run.
	QuietPeriod time.Duration
	// FastProbe, when set before Run, replaces the 10–25 ms probe interval
	// used until the user process first answers. The local platform, whose
	// processes start in milliseconds on an idle machine, probes faster
	// so that its share of a cold start stays small.
	FastProbe time.Duration
	// InProcess, when set before Run, is served like the serving
	// listener, by the same server: the local platform's activator, in
	// the same process, reaches the queue-proxy through it without a
	// socket (a forward.MemListener).
	InProcess net.Listener
	// Records, when set before Run, keeps a record of each message
	// consumed (the local platform's store).
	Records invocation.Sink

	consumerMetrics *consumer.Metrics
	sender          *recordSender // when cfg.RecordsURL is set
	mu              sync.Mutex
	consumers       []*consumer.Consumer
}

// New builds a queue-proxy for cfg, with a Prometheus registry of its own
// holding the queue-proxy series, and one of the Go runtime and process
// collectors, both served on /metrics.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	s := &Server{
		cfg:         cfg,
		log:         log.With("namespace", cfg.Namespace, "function", cfg.Function),
		stats:       NewStats(time.Now()),
		registry:    prometheus.NewRegistry(),
		runtime:     prometheus.NewRegistry(),
		drained:     make(chan struct{}),
		QuietPeriod: DefaultQuietPeriod,
	}
	if err := s.runtime.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := s.runtime.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	m, err := newMetrics(s.registry, cfg.Namespace, cfg.Function, cfg.Concurrency,
		func() float64 { return float64(s.inFlight()) },
		func() float64 { return float64(s.queued()) })
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.prober = newProber(cfg.UserPort, cfg.UserProtocol, log)
	s.proxy = newProxy(cfg, s.stats, m, s.prober.failed, s.log)
	s.prober.down = s.proxy.client.CloseIdle // its connections died with it
	if len(cfg.RabbitMQ) > 0 {
		if s.consumerMetrics, err = consumer.NewMetrics(s.registry, cfg.Namespace, cfg.Function); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		if cfg.RecordsURL != "" {
			labels := prometheus.Labels{"namespace": cfg.Namespace, "function": cfg.Function}
			if s.sender, err = newRecordSender(cfg.RecordsURL, s.registry, labels, s.log); err != nil {
				return nil, fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	return s, nil
}

func (s *Server) inFlight() int64 {
	if b := s.proxy.breaker; b != nil {
		return int64(b.InFlight())
	}
	return s.stats.Concurrency()
}

func (s *Server) queued() int64 {
	if b := s.proxy.breaker; b != nil {
		return int64(b.Waiting())
	}
	return 0
}

// Ready reports whether the instance should get requests: the user process
// answers its /healthz and the proxy is not draining.
func (s *Server) Ready() bool {
	return s.prober.ready.Load() && !s.draining.Load()
}

// Gatherer holds the instance's own series: the local platform gathers its
// instances' into one page. The Go runtime's and the process's are apart:
// in-process instances share the platform's process, which reports them
// once; gathering them per instance cost 82% of a scrape of 1,000
// functions (benchmarks/RESULTS.md, bench-metrics).
func (s *Server) Gatherer() prometheus.Gatherer { return s.registry }

// FirstReady is closed when the user process first answers its health
// check: the moment a new instance can take requests.
func (s *Server) FirstReady() <-chan struct{} { return s.prober.first }

// ProbeFailure says why the last health check of the user process failed
// ("GET /healthz answered 503", a refused connection); empty before one
// has.
func (s *Server) ProbeFailure() string { return s.prober.lastFailure() }

// Run serves until ctx is cancelled (SIGTERM), then drains: /readyz turns
// 503 at once, requests that still arrive are served, and Run returns once
// no request has arrived for the quiet period and none is in flight, or
// when the drain timeout passes.
func (s *Server) Run(ctx context.Context, serving, admin net.Listener) error {
	hangups, err := forward.NewHangups(s.log)
	if err != nil {
		return err
	}
	defer hangups.Close()
	h2c := forward.NewH2C(http.HandlerFunc(s.proxy.ServeHTTP2), forward.InnerHeadBytes, s.log)
	serving = hangups.Listener(serving, s.cfg.ReadTimeout, h2c)
	fs := forward.NewServer(s.proxy.ServeHTTP, s.proxy.serveReadError, s.cfg.MaxBodyBytes, s.cfg.ReadTimeout, s.log)
	fs.ReadBufferSize = forward.InnerHeadBytes // what the activator lets through, and the fields it adds
	fs.Concurrency = min(maxConnections, forward.MaxConns(2))
	hs := &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}

	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	s.prober.fast = s.FastProbe
	go s.prober.run(bgCtx)
	go hangups.Run(bgCtx)
	go forward.SweepIdle(bgCtx, userIdleTimeout/2, s.proxy.client.CloseStale)
	defer s.proxy.client.CloseIdle()

	errc := make(chan error, 4)
	go func() { errc <- fs.Serve(serving) }()
	go func() { errc <- h2c.Serve() }()
	go func() { errc <- hs.Serve(admin) }()
	if s.InProcess != nil {
		// The same server, so the same settings, and its Shutdown (the
		// drain) closes both listeners. fasthttp bounds each listener's
		// connections by Concurrency apart; in-process ones hold no
		// file descriptor of their own.
		inProcess := hangups.Listener(s.InProcess, s.cfg.ReadTimeout, h2c)
		go func() { errc <- fs.Serve(inProcess) }()
		defer s.InProcess.Close() // however Run ends, later dials are refused
	}
	if s.sender != nil && s.Records == nil {
		s.Records = s.sender
		sendCtx, stopSending := context.WithCancel(context.Background())
		sent := make(chan struct{})
		go func() { s.sender.run(sendCtx); close(sent) }()
		defer func() { stopSending(); <-sent }() // what the drain left is sent
	}
	instance := serving.Addr().String()
	if s.cfg.PodIP != "" {
		_, port, _ := net.SplitHostPort(instance)
		instance = net.JoinHostPort(s.cfg.PodIP, port)
	}
	consumed := s.startConsumers(bgCtx, instance)
	s.log.Info("queue-proxy serving", "serving", serving.Addr().String(), "admin", admin.Addr().String(),
		"user", s.proxy.client.Addr(), "concurrency", s.cfg.Concurrency, "queueDepth", s.cfg.QueueDepth)

	select {
	case err := <-errc:
		_ = fs.Shutdown()
		_ = h2c.Close()
		_ = hs.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	// The user process's own stop follows: its preStop hook waits for
	// the drain (WaitForDrainPath).
	s.proxy.client.Stopping()
	consumed() // no new message; those in flight end
	s.drain(fs, h2c)
	close(s.drained)
	// The preStop hook waiting is answered before the port closes: it
	// was called as the drain began, so that its floor has mostly passed.
	stopCtx, cancel := context.WithTimeout(context.Background(), wire.MinStopDelay+time.Second)
	defer cancel()
	if err := hs.Shutdown(stopCtx); err != nil {
		return hs.Close()
	}
	return nil
}

// startConsumers starts consuming the function's queues once the user
// process is first ready, and returns the stop of the drain: it cancels
// the consumers and returns when their messages in flight have ended.
func (s *Server) startConsumers(ctx context.Context, instance string) (stop func()) {
	if len(s.cfg.RabbitMQ) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	iso := consumer.NewIsolation() // the consumers share the process
	for _, t := range s.cfg.RabbitMQ {
		prefetch := t.Prefetch
		if s.cfg.Concurrency > 0 {
			prefetch = min(prefetch, s.cfg.Concurrency)
		}
		c := consumer.New(consumer.Options{
			Namespace: s.cfg.Namespace, Function: s.cfg.Function, Trigger: t.RabbitMQTrigger, URL: t.URL,
			Prefetch: prefetch, Backoff: s.cfg.RetryBackoff, Instance: instance, Records: s.Records,
			Metrics: s.consumerMetrics, Log: s.log, Isolation: iso,
		}, invoker{s.proxy, s.prober})
		s.mu.Lock()
		s.consumers = append(s.consumers, c)
		s.mu.Unlock()
		wg.Go(func() {
			select {
			case <-s.prober.first:
				c.Run(ctx)
			case <-ctx.Done():
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// invoker is what the consumers invoke the user process through: the
// proxy, and the prober for its readiness.
type invoker struct {
	*proxy
	prober *prober
}

func (i invoker) Ready() <-chan struct{} { return i.prober.whenReady() }

// Consumers reports what the consumers of the function's queues are
// doing; none before Run.
func (s *Server) Consumers() []consumer.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]consumer.Status, 0, len(s.consumers))
	for _, c := range s.consumers {
		out = append(out, c.Status())
	}
	return out
}

func (s *Server) drain(fs *fasthttp.Server, h2c *forward.H2C) {
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	s.log.Info("draining", "timeout", s.cfg.DrainTimeout)
	tick := time.NewTicker(min(s.QuietPeriod/4+time.Millisecond, 50*time.Millisecond))
	defer tick.Stop()
	for now := time.Now(); now.Before(deadline) && s.stats.IdleFor(now) < s.QuietPeriod; now = time.Now() {
		<-tick.C
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// The WebSockets still open when the drain runs out are closed: a
	// clean close, not the process's end under them.
	context.AfterFunc(ctx, s.proxy.switches.CloseAll)
	h2cDone := make(chan error, 1)
	go func() { h2cDone <- h2c.Shutdown(ctx) }()
	if err := errors.Join(fs.ShutdownWithContext(ctx), <-h2cDone); err != nil {
		s.log.Warn("drain timed out with requests in flight", "inFlight", s.inFlight(), "err", err)
		return
	}
	s.log.Info("drained")
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.draining.Load():
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		case !s.prober.ready.Load():
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "function not ready"})
		default:
			httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
		}
	})
	mux.HandleFunc("GET "+wire.WaitForDrainPath, func(w http.ResponseWriter, r *http.Request) {
		floor := time.NewTimer(wire.MinStopDelay)
		defer floor.Stop()
		select {
		case <-s.drained:
		case <-r.Context().Done():
			return
		}
		select {
		case <-floor.C:
		case <-r.Context().Done():
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "drained"})
	})
	mux.HandleFunc("GET "+wire.StatsPath, func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, s.stats.Report(time.Now(), s.inFlight(), s.queued()))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{s.registry, s.runtime}, promhttp.HandlerOpts{}))
	return mux
}

// Listen opens the serving and admin listeners of cfg on all interfaces.
func Listen(cfg Config) (serving, admin net.Listener, err error) {
	serving, err = net.Listen("tcp", fmt.Sprintf(":%d", cfg.ServingPort))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", wire.EnvServingPort, err)
	}
	admin, err = net.Listen("tcp", fmt.Sprintf(":%d", cfg.AdminPort))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("%s: %w", wire.EnvAdminPort, err), serving.Close())
	}
	return serving, admin, nil
}
