// Package local is the embedded platform `sless dev` runs: the real
// activator, autoscaler and queue-proxies in one process, with function
// instances as local processes, from a directory of the same Function
// manifests users apply with kubectl.
package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/activator"
	"sless.dev/sless/adminapi"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/queuedepth"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/console"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/local/supervisor"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runclient"
	"sless.dev/sless/runtimes"
	"sless.dev/sless/timeline"
)

// Options configure the platform.
type Options struct {
	// Dir holds the Function manifests; sources live in subdirectories.
	Dir string
	// AllowExternalSources serves functions whose spec.source lies outside
	// Dir; off, such manifests are refused, so a directory of manifests
	// cannot expose files the platform was not given.
	AllowExternalSources bool
	// Listen and Admin are the invocation and admin addresses.
	Listen, Admin string
	// CacheDir keeps builds and installed dependencies between runs.
	CacheDir string
	// Out shows the function table, build progress and the functions'
	// output.
	Out io.Writer
	Log *slog.Logger
	// InstanceLog is for the instances' queue-proxies (Log when nil).
	InstanceLog *slog.Logger
	// Poll is how often Dir is checked for changes.
	Poll time.Duration
	// AdminToken, when set, is the bearer token the admin API requires.
	AdminToken string
	// Drain bounds the drain of requests and instances at shutdown.
	Drain time.Duration
	// MaxBodyBytes bounds request bodies (activator.DefaultMaxBodyBytes
	// when 0).
	MaxBodyBytes int64
	// ReadTimeout bounds how long a client may take to send a request
	// head or each part of its body (forward.DefaultReadTimeout when 0).
	ReadTimeout time.Duration
	// Records keeps the invocation records and answers the admin API's
	// routes of them (an in-memory ring when nil). The platform only adds
	// to it: its owner writes and closes it.
	Records RecordStore
	// Runs keeps the runs (an in-memory store when nil, whose runs end
	// with the process). Its owner closes it.
	Runs runs.Store
	// Registry, when set, is where the platform registers its metrics and
	// what its /metrics serves, so that the metrics of its owner's parts
	// (the records store) show there too.
	Registry *prometheus.Registry
	// InstallRetry is the first wait before a function whose dependencies
	// failed to install is prepared again with the same source; the wait
	// doubles with each failure, up to maxInstallRetry.
	InstallRetry time.Duration
	// AMQPURL is the broker of every RabbitMQ trigger (a manifest's
	// connectionSecret is for Kubernetes), and the one the answers of
	// runs are published to (async.onSuccess, onFailure); empty, none
	// is consumed, and answers wait, kept with their runs.
	AMQPURL string
	// RetryBackoff is the wait before a failed message's first retry
	// (consumer.DefaultBackoff when 0).
	RetryBackoff time.Duration
	// ReadinessGrace is how long an instance may run without passing its
	// readiness check before its function shows as crashing with reason
	// ReadinessFailing, and requests are answered 503 with the cause
	// (v1alpha1.ReadinessGrace when 0).
	ReadinessGrace time.Duration
	// NoQueueWake leaves no parked consumer on the queues of functions at
	// zero: only the depth read once a second wakes them, as without it.
	// For comparisons (bench-queue).
	NoQueueWake bool
}

// RecordStore keeps invocation records and answers queries of them: the
// ring, or the PostgreSQL store.
type RecordStore interface {
	invocation.Sink
	activator.RecordReader
}

// maxInstallRetry bounds the wait between retries of a failed install.
const maxInstallRetry = 5 * time.Minute

// Platform is a running local platform.
type Platform struct {
	opts           Options
	serving, admin net.Listener
	// functionRuns are the FunctionRuns of the manifests, submitted
	// through serving.
	functionRuns *functionRuns
	reg          *prometheus.Registry
	metrics      *metrics
	records      RecordStore
	act          *activator.Activator
	scaler       *autoscaler.Autoscaler
	sup          *supervisor.Supervisor
	cron         *scheduler.Scheduler
	logs         logs
	pokes        poker
	queues       *queuedepth.Brokers // nil without a broker
	waker        *queuedepth.Waker
	timeline     *timeline.Timeline
	builds       builds

	// applyMu orders what reaches the supervisor, autoscaler, activator
	// and scheduler about one function: a build's result, an override,
	// a removal. Held around p.mu, never inside it.
	applyMu sync.Mutex
	mu      sync.Mutex
	fns     map[types.NamespacedName]*entry
	// loadErrs are the errors of the last load of the manifests, for the
	// admin API: on the terminal alone, a manifest that stopped loading
	// left its functions serving the last version with no sign of it.
	loadErrs []adminapi.ManifestError

	shownErrs map[string]bool // load errors shown, so each is shown once
}

// entry is a function as the platform knows it.
type entry struct {
	fn          manifests.Entry
	created     time.Time // when its manifest was first loaded
	fingerprint string
	scaling     autoscaler.Target
	running     bool   // handed to the supervisor
	err         string // the last build error
	// installFailures counts the failed installs of this fingerprint in
	// a row; retryAt is when to try again, zero when there is no retry.
	installFailures int
	retryAt         time.Time
	proc            runtimes.Process // the last good build
	over            overrides        // the session's changes to fn
	build           *build           // queued or running, nil when none
}

// due reports whether e, at fingerprint fp, needs preparing at now: a
// build under way is due again only when fp is not the one it builds.
func (e *entry) due(fp string, now time.Time) bool {
	switch {
	case e == nil:
		return true
	case e.build != nil:
		return e.build.fp != fp
	}
	return e.fingerprint != fp || !e.retryAt.IsZero() && !now.Before(e.retryAt)
}

// New binds the platform's ports and builds its parts; Run starts it.
func New(opts Options) (*Platform, error) {
	if opts.Poll == 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.Drain == 0 {
		opts.Drain = 30 * time.Second
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.InstallRetry == 0 {
		opts.InstallRetry = 10 * time.Second
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = activator.DefaultMaxBodyBytes
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = forward.DefaultReadTimeout
	}
	if opts.Runs == nil {
		opts.Runs = runs.NewMemory()
	}
	p := &Platform{opts: opts, reg: opts.Registry, records: opts.Records, fns: map[types.NamespacedName]*entry{},
		timeline: timeline.New(), builds: builds{max: maxParallelPrepare}}
	if p.reg == nil {
		p.reg = prometheus.NewRegistry()
	}
	if p.records == nil {
		p.records = invocation.NewRing(10_000)
	}
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if p.metrics, err = newMetrics(p.reg); err != nil {
		return nil, err
	}
	p.sup = supervisor.New(supervisor.Options{Output: opts.Out, Log: opts.Log, InstanceLog: opts.InstanceLog, ReadinessGrace: opts.ReadinessGrace,
		Changed: p.instancesChanged, Failing: p.failing, Lines: p.logs.add, Records: timeline.Tee(p.records, p.timeline),
		Crashed: func(namespace, name string) { p.metrics.crashes.WithLabelValues(namespace, name).Inc() }})
	scaling := []autoscaler.Option{autoscaler.WithRuns(opts.Runs, opts.Log)}
	if opts.AMQPURL != "" {
		p.queues = queuedepth.NewBrokers(queuedepth.OneBroker(opts.AMQPURL), opts.Log)
		scaling = append(scaling, autoscaler.WithQueueReader(p.queues))
		if !opts.NoQueueWake {
			p.waker = queuedepth.NewWaker(p.queues, opts.Log)
			scaling = append(scaling, autoscaler.WithWaker(p.waker))
		}
	}
	if p.scaler, err = autoscaler.New(autoscaler.NewScraper(time.Second), p.sup, p.reg, opts.Log, scaling...); err != nil {
		return nil, err
	}
	p.pokes = make(poker, maxPendingPokes)
	if p.act, err = activator.New(activator.Config{MaxBodyBytes: opts.MaxBodyBytes, Domain: Domain, Dial: p.sup.Dial}, p.pokes, timeline.Tee(p.records, p.timeline), p.reg, opts.Log); err != nil {
		return nil, err
	}
	p.act.EnableRuns(opts.Runs, activator.RunsConfig{BrokerURL: opts.AMQPURL})
	cronMetrics, err := scheduler.NewMetrics(p.reg)
	if err != nil {
		return nil, err
	}
	p.cron = scheduler.New(cronFirer{p.act}, p.scaler, cronLedger(opts), cronMetrics, opts.Log)
	if p.serving, err = net.Listen("tcp", opts.Listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	if p.admin, err = net.Listen("tcp", opts.Admin); err != nil {
		p.serving.Close()
		return nil, fmt.Errorf("--admin: %w", err)
	}
	p.functionRuns = p.newFunctionRuns()
	return p, nil
}

// Addr is the invocation address; AdminAddr the admin one.
func (p *Platform) Addr() string { return p.serving.Addr().String() }

// newFunctionRuns submits the manifests' FunctionRuns to the platform's
// own invocation port (on loopback when it listens on every address).
func (p *Platform) newFunctionRuns() *functionRuns {
	host, port, _ := net.SplitHostPort(p.Addr())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return &functionRuns{client: &runclient.Client{Base: "http://" + net.JoinHostPort(host, port)}, out: p.opts.Out,
		runs: map[types.NamespacedName]*submittedRun{}}
}
func (p *Platform) AdminAddr() string { return p.admin.Addr().String() }

// Run loads and starts the functions, serves until ctx ends, then drains
// the requests in flight and stops every instance.
func (p *Platform) Run(ctx context.Context) error {
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	metrics := gatherer{platform: p.reg, instances: p.sup.Metrics}
	// Every hop lives in this process: a client connection may take one
	// to a queue-proxy (both ends here) and one to the function.
	srv := &activator.Server{Activator: p.act, DrainTimeout: p.opts.Drain, ReadTimeout: p.opts.ReadTimeout,
		MaxConns: forward.MaxConns(4), Log: p.opts.Log, Admin: activator.AdminServer{
			Activator: p.act, Registry: metrics, Records: p.records, Token: p.opts.AdminToken,
			API: p.apiHandler(), Console: console.Handler{Token: p.opts.AdminToken}, Log: p.opts.Log,
		}}
	served := make(chan error, 1)
	go func() { served <- srv.Run(ctx, p.serving, p.admin) }()
	go p.scaler.Run(bg)
	// The activator's waiting requests reach the autoscaler every second,
	// as activators report them over the network on Kubernetes.
	go activator.ReportBuffered(bg, p.act, time.Second, func(counts []wire.BufferedCount) {
		now := time.Now()
		for _, c := range counts {
			p.scaler.SetBuffered(now, "local", c.Namespace, c.Name, c.Count)
		}
	})
	go p.deliverPokes(bg)
	// Runs are claimed until the drain begins; those under way end with
	// it, before Run returns and the store is closed.
	dispatching, stopDispatch := context.WithCancel(ctx)
	defer stopDispatch()
	dispatched := make(chan struct{})
	go func() { p.act.Dispatch(dispatching); close(dispatched) }()
	// The scheduler stops as the drain begins: a fire or a warm-up then
	// would start an instance only to stop it.
	go p.cron.Run(ctx)
	go p.sample(bg, time.Second)

	first := p.sync(ctx)
	go func() {
		// The table once the first builds are done, as the manifest
		// loop goes on.
		for _, b := range first {
			<-b.done
		}
		if ctx.Err() == nil {
			p.printTable()
		}
	}()
	watched := make(chan struct{})
	go func() { p.watch(ctx); close(watched) }()

	var err error
	drainStart := time.Now()
	select {
	case err = <-served: // it could not serve
	case <-ctx.Done():
		drainStart = time.Now()
		p.printDraining()
		err = <-served
	}
	stopDispatch() // no run is claimed once the drain begins, nor once serving failed
	// --drain is the whole budget, counted from ctx's end: the
	// activator's drain, then the instances', and what is left at its end
	// is stopped at once.
	shutdown, cancel := context.WithDeadline(context.Background(), drainStart.Add(p.opts.Drain))
	defer cancel()
	<-watched       // queues no more builds
	p.builds.wait() // cancelled with ctx: none starts an instance after
	err = errors.Join(err, p.sup.Shutdown(shutdown))
	select {
	case <-dispatched:
	case <-shutdown.Done():
	}
	if p.waker != nil {
		p.waker.Close()
	}
	if p.queues != nil {
		err = errors.Join(err, p.queues.Close())
	}
	return err
}

// printDraining says what the drain waits for.
func (p *Platform) printDraining() {
	requests := 0
	for _, f := range p.act.Functions() {
		requests += f.InFlight + f.Waiting
	}
	instances := 0
	for _, st := range p.Functions() {
		instances += st.Ready + st.Starting
	}
	fmt.Fprintf(p.opts.Out, "draining %d requests and %d instances (at most %v; Ctrl-C again stops at once)\n",
		requests, instances, p.opts.Drain)
}

// watch applies changes to Dir until ctx ends.
func (p *Platform) watch(ctx context.Context) {
	t := time.NewTicker(p.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.sync(ctx)
		}
	}
}

// sync loads Dir and applies what changed: new and changed functions are
// queued to be prepared and (re)started, removed ones stopped, their
// builds cancelled. It never waits for a build, so that one slow build
// holds up no other change. A function whose manifest turned invalid
// keeps running as it was, with the error shown. It returns the builds it
// queued.
func (p *Platform) sync(ctx context.Context) []*build {
	fns, errs := manifests.Load(p.opts.Dir, manifests.LoadOptions{AllowExternalSources: p.opts.AllowExternalSources})
	fnRuns, runErrs := manifests.LoadRuns(p.opts.Dir, manifests.LoadOptions{})
	p.reportLoadErrors(append(slices.Clone(errs), runErrs...))
	loadErrs := manifestErrors(append(slices.Clone(errs), runErrs...))
	p.mu.Lock()
	p.loadErrs = loadErrs
	p.mu.Unlock()
	broken := map[string]bool{}
	for _, err := range errs {
		var fe *manifests.FileError
		if errors.As(err, &fe) {
			broken[fe.File] = true
		}
	}
	if len(fns) == 0 && len(errs) == 1 && len(broken) == 0 {
		return nil // the directory itself is unreadable: change nothing
	}
	seen := map[types.NamespacedName]bool{}
	var queued []*build
	for _, fn := range fns {
		seen[fn.Key()] = true
		fp, err := manifests.Fingerprint(fn)
		if err != nil {
			p.opts.Log.Warn("read source", "function", fn.Key().String(), "err", err)
			continue
		}
		p.mu.Lock()
		e := p.fns[fn.Key()]
		isNew := e == nil
		var b *build
		if e.due(fp, time.Now()) {
			if isNew {
				// Known at once, shown as building: its requests wait
				// for the build as for a cold start.
				e = &entry{fn: fn, created: time.Now()}
				p.fns[fn.Key()] = e
			}
			b = p.queueBuildLocked(ctx, e, fn, fp)
		}
		p.mu.Unlock()
		if isNew {
			p.timeline.Track(fn.Namespace, fn.Name)
			p.act.SetFunction(activator.RouteSpecFor(fn.Function))
		}
		if b != nil {
			p.builds.add(b)
			queued = append(queued, b)
		}
	}
	p.removeUnseen(seen, broken)
	p.functionRuns.sync(ctx, fnRuns)
	return queued
}

// queueBuildLocked makes a build of fn at fp e's, cancelling the one it
// replaces; the caller adds it to p.builds. Called with p.mu held.
func (p *Platform) queueBuildLocked(ctx context.Context, e *entry, fn manifests.Entry, fp string) *build {
	if e.build != nil {
		e.build.cancel()
	}
	bctx, cancel := context.WithCancel(ctx)
	b := &build{fn: fn, fp: fp, ctx: bctx, cancel: cancel, urgent: e.running, done: make(chan struct{}),
		run: func(b *build) { p.deploy(ctx, e, b) }}
	e.build = b
	return b
}

// removeUnseen removes the functions no manifest declares any more, but
// those of manifests that do not load now, and cancels their builds.
func (p *Platform) removeUnseen(seen map[types.NamespacedName]bool, broken map[string]bool) {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	p.mu.Lock()
	var gone []*entry
	for key, e := range p.fns {
		if !seen[key] && !broken[e.fn.File] {
			gone = append(gone, e)
			delete(p.fns, key)
			if e.build != nil {
				e.build.cancel()
				e.build = nil
			}
		}
	}
	p.mu.Unlock()
	for _, e := range gone {
		p.remove(e)
	}
}

// reportLoadErrors shows the errors not shown at the previous load. Only
// sync calls it, never two at once.
func (p *Platform) reportLoadErrors(errs []error) {
	shown := make(map[string]bool, len(errs))
	for _, err := range errs {
		msg := err.Error()
		if !p.shownErrs[msg] {
			fmt.Fprintf(p.opts.Out, "error: %s (skipped)\n", msg)
		}
		shown[msg] = true
	}
	p.shownErrs = shown
}

// manifestErrors are a load's errors as the admin API shows them.
func manifestErrors(errs []error) []adminapi.ManifestError {
	out := make([]adminapi.ManifestError, 0, len(errs))
	for _, err := range errs {
		if fe, ok := errors.AsType[*manifests.FileError](err); ok {
			out = append(out, adminapi.ManifestError{File: fe.File, Function: fe.Function, Error: fe.Err.Error()})
			continue
		}
		out = append(out, adminapi.ManifestError{Error: err.Error()})
	}
	return out
}

// deploy runs build b of e, a new or changed function, and hands the
// result to the supervisor, the autoscaler and the activator, in that
// order, so each finds what it calls; unless b was cancelled meanwhile (a
// newer change, the function's removal, the platform's drain), whose
// result is dropped.
func (p *Platform) deploy(ctx context.Context, e *entry, b *build) {
	start := time.Now()
	fn, fp := b.fn, b.fp
	proc, err := runtimes.Prepare(b.ctx, runtimes.Source{
		Namespace: fn.Namespace, Name: fn.Name, Runtime: fn.Spec.Runtime,
		Dir: fn.SourceDir, Handler: fn.Spec.EffectiveHandler(), Command: fn.Spec.Command,
	}, runtimes.Options{CacheDir: p.opts.CacheDir, Progress: p.opts.Out})
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	p.mu.Lock()
	if b.ctx.Err() != nil || e.build != b {
		p.mu.Unlock()
		p.opts.Log.Info("build cancelled", "function", fn.Key().String(), "after", time.Since(start).Round(time.Millisecond))
		return
	}
	b.cancel() // its context's resources: it is done
	e.build = nil
	if e.fingerprint != fp {
		e.installFailures = 0
	}
	e.fn, e.fingerprint, e.retryAt = fn, fp, time.Time{}
	if err != nil {
		p.metrics.prepareFailures.WithLabelValues(fn.Namespace, fn.Name).Inc()
		e.err = err.Error()
		retry := ""
		if _, ok := errors.AsType[*runtimes.InstallError](err); ok {
			wait := min(p.opts.InstallRetry<<min(e.installFailures, 10), maxInstallRetry)
			e.installFailures++
			e.retryAt = time.Now().Add(wait)
			retry = fmt.Sprintf(" (retrying in %v)", wait)
		}
		running := e.running
		p.mu.Unlock()
		if !running {
			// Nothing to start: say why at once rather than hold
			// requests to their timeout.
			p.act.SetUnavailable(fn.Namespace, fn.Name, "build failed: "+firstLine(err.Error()))
		}
		fmt.Fprintf(p.opts.Out, "error: %s: %s: %v%s\n", fn.File, fn.Key(), err, retry)
		return
	}
	e.err, e.installFailures, e.proc = "", 0, proc
	p.mu.Unlock()
	p.startLocked(ctx, e)
	p.opts.Log.Info("function deployed", "function", fn.Key().String(), "prepared", time.Since(start).Round(time.Millisecond))
}

// start hands e's prepared function, with the session's overrides, to the
// supervisor, the autoscaler, the activator and the cron scheduler, in
// that order, so each finds what it calls; unless e was removed.
func (p *Platform) start(ctx context.Context, e *entry) {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	p.mu.Lock()
	current := p.fns[e.fn.Key()] == e
	p.mu.Unlock()
	if current {
		p.startLocked(ctx, e)
	}
}

// startLocked is start, with p.applyMu held and e current.
func (p *Platform) startLocked(ctx context.Context, e *entry) {
	p.mu.Lock()
	fn, proc, fp := e.effective(), e.proc, e.fingerprint
	scaling := autoscaler.TargetFor(fn.Function)
	added := !e.running
	rescale := added || !reflect.DeepEqual(e.scaling, scaling)
	e.running, e.scaling = true, scaling
	p.mu.Unlock()

	p.sup.Set(supervisor.Workload{
		Namespace: fn.Namespace, Name: fn.Name, Revision: fp, Process: proc, Env: fn.Spec.EnvValues(),
		Concurrency: int(fn.Spec.Concurrency), Timeout: seconds(fn.Spec.TimeoutSeconds),
		IdleTimeout: seconds(fn.Spec.IdleTimeoutSeconds), MaxDuration: seconds(fn.Spec.EffectiveMaxDurationSeconds()),
		Drain: seconds(fn.Spec.EffectiveDrainSeconds()), Protocol: fn.Spec.Protocol, MaxBodyBytes: p.opts.MaxBodyBytes, ReadTimeout: p.opts.ReadTimeout,
		RabbitMQ: p.rabbitMQ(fn), RetryBackoff: p.opts.RetryBackoff,
	})
	if rescale {
		// The autoscaler decides on a function new to it at once; one
		// whose settings changed starts a new decider, decided on now,
		// with the requests that waited for its build.
		p.scaler.SetFunction(time.Now(), scaling)
		if waiting := p.act.Buffered()[fn.Key()]; !added || waiting > 0 {
			p.scaler.Poke(ctx, time.Now(), fn.Namespace, fn.Name, waiting)
		}
	}
	p.act.SetFunction(activator.RouteSpecFor(fn.Function))
	p.act.SetUnavailable(fn.Namespace, fn.Name, "") // a failed build's, if any
	if triggers, err := scheduler.TriggersFor(fn.Function); err != nil {
		p.opts.Log.Warn("cron triggers", "function", fn.Key().String(), "err", err) // validation parsed them
	} else {
		p.cron.Set(ctx, fn.Namespace, fn.Name, triggers)
	}
}

// failing is the supervisor's news of a version that cannot become ready
// (reason, cause: it crashes, or runs without passing its readiness
// check), or that no longer fails (""): the activator answers 503 with the
// cause while no instance serves, and the terminal says it once.
func (p *Platform) failing(namespace, name, reason, cause string, serving int) {
	if cause == "" {
		p.act.SetUnavailable(namespace, name, "")
		return
	}
	what := "crashing"
	if reason == v1alpha1.ReasonReadinessFailing {
		what = "not ready"
	}
	p.act.SetUnavailable(namespace, name, what+": "+firstLine(cause))
	if serving > 0 {
		fmt.Fprintf(p.opts.Out, "error: %s/%s: update failed, the previous version serves: %s\n", namespace, name, firstLine(cause))
		return
	}
	fmt.Fprintf(p.opts.Out, "error: %s/%s: %s: %s\n", namespace, name, what, firstLine(cause))
}

// firstLine is a message's first line, for one-line answers and tables.
func firstLine(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	return line
}

func (p *Platform) remove(e *entry) {
	fn := e.fn
	p.cron.Remove(fn.Namespace, fn.Name)
	p.act.RemoveFunction(fn.Namespace, fn.Name)
	p.scaler.RemoveFunction(fn.Namespace, fn.Name)
	p.sup.Remove(fn.Namespace, fn.Name)
	p.logs.forget(fn.Namespace, fn.Name)
	p.metrics.forget(fn.Namespace, fn.Name)
	p.timeline.Remove(fn.Namespace, fn.Name)
	fmt.Fprintf(p.opts.Out, "removed %s (its manifest is gone)\n", fn.Key())
}

// instancesChanged tells the activator and the autoscaler a function's
// ready instances.
func (p *Platform) instancesChanged(namespace, name string, ready []supervisor.Endpoint) {
	addrs := make([]string, len(ready))
	admins := make([]string, len(ready))
	for i, ep := range ready {
		addrs[i], admins[i] = ep.Addr, ep.Admin
	}
	p.act.SetEndpoints(namespace, name, addrs)
	p.scaler.SetInstances(namespace, name, admins)
}

// rabbitMQ lists the queues fn's instances consume, on the platform's
// broker.
func (p *Platform) rabbitMQ(fn manifests.Entry) []queueproxy.RabbitMQ {
	if p.opts.AMQPURL == "" {
		return nil
	}
	var out []queueproxy.RabbitMQ
	for _, t := range wire.RabbitMQTriggers(fn.Spec) {
		out = append(out, queueproxy.RabbitMQ{RabbitMQTrigger: t, URL: p.opts.AMQPURL})
	}
	return out
}

// cronLedger keeps the cron fires of opts.Dir's functions in a file under
// the cache directory, so that fires missed while `sless dev` was stopped
// get their catch-up fire when it starts again. The file is per functions
// directory: two of them may hold functions of the same names.
func cronLedger(opts Options) scheduler.Ledger {
	dir, err := filepath.Abs(opts.Dir)
	if opts.CacheDir == "" || err != nil {
		return &scheduler.MemoryLedger{}
	}
	sum := sha256.Sum256([]byte(dir))
	l, err := scheduler.OpenFileLedger(filepath.Join(opts.CacheDir, "cron", hex.EncodeToString(sum[:8])+".json"))
	if err != nil {
		opts.Log.Warn("cron: fires missed before this start are not caught up", "err", err)
	}
	return l
}

// cronFirer sends cron fires through the in-process activator.
type cronFirer struct{ act *activator.Activator }

func (c cronFirer) Fire(ctx context.Context, f scheduler.Fire) (int, error) {
	t := f.Trigger
	return c.act.Fire(ctx, t.Namespace, t.Function, t.Name, f.Scheduled, []byte(t.Body))
}

// poker wakes the in-process autoscaler for a request waiting at zero.
// Poke never blocks: the activator pokes from inside SetEndpoints, which
// the supervisor calls with its lock held, and the autoscaler's decision
// calls back into the supervisor. A goroutine takes the pokes in order;
// when it lags, a poke is dropped, since the buffered counts reported
// every second ask for the same instance.
type poker chan types.NamespacedName

// maxPendingPokes bounds the pokes waiting for the autoscaler.
const maxPendingPokes = 1024

func (k poker) Poke(namespace, name string) {
	select {
	case k <- types.NamespacedName{Namespace: namespace, Name: name}:
	default:
	}
}

// deliverPokes hands the pokes to the autoscaler until ctx ends.
func (p *Platform) deliverPokes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case fn := <-p.pokes:
			p.scaler.Poke(ctx, time.Now(), fn.Namespace, fn.Name, 1)
		}
	}
}

func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }

// Domain is the host routing's domain: a function is reached as
// <name>.<namespace>.localhost too, which gRPC clients need (they cannot
// add a path prefix), and which curl and browsers resolve to loopback.
const Domain = "localhost"

// URL is where a function is invoked.
func (p *Platform) URL(namespace, name string) string {
	host, port, _ := net.SplitHostPort(p.Addr())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/fn/" + namespace + "/" + name
}
