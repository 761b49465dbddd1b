// Package autoscaler decides how many instances each function needs and
// makes it so: it observes every function's load (Scraper, and what
// activators push), decides with the KPA (package kpa) every tick and on a
// poke, and writes the replicas through a ReplicaWriter (the Deployment's
// scale subresource on Kubernetes, in autoscaler/kubewatch; the supervisor
// in sless dev).
package autoscaler

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/internal/wire"
)

// DecideEvery is the tick of decisions; load is observed every second.
const DecideEvery = 2 * time.Second

// stepWorkers bounds the goroutines of a step, which share its functions.
// A goroutine per function cost half of a tick's CPU over 10,000 functions
// (BenchmarkStep10k); this many still wait out as many slow scrapes, queue
// reads or replica writes at once, so a step outlasts their timeout only
// when more functions than this are slow together.
const stepWorkers = 1024

// ReplicaWriter makes a function's replicas so: the Deployment's scale
// subresource on Kubernetes, the supervisor locally. It returns the
// instances there were, starting or ready (sless_autoscaler_actual_replicas;
// KEDA's side, which has none, the replicas last reported). A writer that
// goes over the network bounds its own calls (the autoscaler writes every
// function's replicas each tick, and a deadline per write would cost
// allocations for the in-memory writers).
type ReplicaWriter interface {
	Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error)
}

// ErrNoWorkload is what a ReplicaWriter's error wraps when the function's
// workload does not exist yet: a Function seen before the controller has
// made its Deployment. The write is made again with the next decision;
// it is not an error worth a log line at that level.
var ErrNoWorkload = errors.New("the function's workload does not exist yet")

// Metric is the load signal a function scales on.
type Metric int

// The metrics of scale.metric.
const (
	MetricConcurrency Metric = iota
	MetricRPS
)

// Function is what the autoscaler scales: its settings and, pushed as they
// change, its ready instances' admin addresses.
type Function struct {
	Namespace, Name string
	Spec            kpa.Spec
	Metric          Metric
	// Queues are the RabbitMQ queues the function consumes: each asks for
	// instances by its depth, read each second when a QueueReader is set.
	Queues []Queue
}

// Queue is a queue a function consumes, with KEDA's QueueLength settings:
// it asks for ⌈ready messages / Target⌉ instances once it holds more than
// Activation messages (see QueueDesired).
type Queue struct {
	// Broker names the queue's broker for the QueueReader: on Kubernetes
	// the namespace/name of the trigger's connectionSecret; empty in
	// sless dev, which has one.
	Broker string
	// Name is the queue's name on its broker.
	Name string
	// Target is targetQueueLength, Activation activationQueueLength.
	Target, Activation int64
}

// QueueReader reads how many messages in a queue are ready for delivery.
type QueueReader interface {
	Depth(ctx context.Context, broker, queue string) (int64, error)
}

// Waker parks a consumer on the queues of a function with no ready
// instance (by broker), and calls wake on the first message: the function
// starts at once, not at the next depth read or KEDA poll.
type Waker interface {
	Park(key string, queues map[string][]string, wake func())
	Unpark(key string)
}

// queueReadTimeout bounds the reads of one function's queues in a second,
// so that a broker that does not answer cannot hold up the other functions.
const queueReadTimeout = time.Second

// Autoscaler observes every function's load and queue depths each second,
// decides every DecideEvery (and at once on a poke) and writes the
// replicas. All its work is Step, called with the time; Run calls it from a
// ticker.
type Autoscaler struct {
	scraper *Scraper
	writer  ReplicaWriter
	log     *slog.Logger
	metrics *metrics

	mu     sync.Mutex
	fns    map[string]*state
	steps  int
	queues QueueReader
	waker  Waker
	// fresh are the functions added since Run last looked: it decides on
	// them at once, woken by wake, so that a new function's first answer
	// (to KEDA, or its initial instances) does not wait for a tick.
	fresh []*state
	wake  chan struct{}
}

type state struct {
	fn       Function
	decider  *kpa.Decider
	admins   []string             // ready instances' queue-proxy admin addresses
	buffered []report             // requests waiting, one report per activator
	floor    int32                // cron pre-warm floor
	queue    int32                // queue-depth desired: the most any queue asks for
	reads    map[string]queueRead // by queue name
	desired  int32                // last decision
	panicked bool                 // the last decision was in panic mode
	// wokeAt is when a decision asked for instances while none was
	// ready; startup is the last time from then to a ready instance.
	wokeAt  time.Time
	startup time.Duration
	// coldSince is when a request first waited (a poke, or a count of
	// requests buffered) while no instance was ready; the first ready
	// instance ends that cold start.
	coldSince time.Time
	series    *series // its gauges, from its first decision
	// scrapeFailing and noData are logged when they start and end, not
	// every second.
	scrapeFailing, noData bool
	// writing is set while a write of replicas is in flight; unwritten
	// while a decision waits for it.
	writing, unwritten bool
	written            int32 // the replicas last written (-1: none yet), logged when they change
	mu                 sync.Mutex
}

// queueRead is what one queue asked for at its last good read, kept while
// reads fail.
type queueRead struct {
	desired int32
	depth   int64  // messages ready at the last good read
	failing bool   // the last read failed: logged once, not every second
	err     string // why it failed
}

// New returns an autoscaler reading instances with scraper, writing
// replicas with writer and registering its metrics with reg.
func New(scraper *Scraper, writer ReplicaWriter, reg prometheus.Registerer, log *slog.Logger) (*Autoscaler, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Autoscaler{scraper: scraper, writer: writer, log: log, metrics: m,
		fns: map[string]*state{}, wake: make(chan struct{}, 1)}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sless_autoscaler_functions", Help: "Functions the autoscaler scales.",
	}, func() float64 { return float64(a.count()) })); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Autoscaler) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.fns)
}

func key(namespace, name string) string { return namespace + "/" + name }

// SetFunction adds a function or changes its settings (a new decider:
// history is per setting). A new function is decided on at once by Run.
func (a *Autoscaler) SetFunction(now time.Time, fn Function) {
	a.mu.Lock()
	st := a.fns[key(fn.Namespace, fn.Name)]
	if st == nil {
		st = &state{written: -1}
		a.fns[key(fn.Namespace, fn.Name)] = st
		a.fresh = append(a.fresh, st)
		select {
		case a.wake <- struct{}{}:
		default: // Run is woken already
		}
	}
	// st.mu under a.mu: Run must not take the fresh state before it
	// has its function.
	st.mu.Lock()
	st.fn, st.decider = fn, kpa.NewDecider(fn.Spec, now)
	idle := len(st.admins) == 0
	st.mu.Unlock()
	a.mu.Unlock()
	a.watchQueues(fn, idle)
}

// SetWaker makes the autoscaler wake functions at zero on their queues'
// first message.
func (a *Autoscaler) SetWaker(w Waker) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waker = w
}

// watchQueues parks a consumer on the queues of a function with no ready
// instance, and unparks it once one is ready (its queue-proxies consume).
// Called with no lock of st held.
func (a *Autoscaler) watchQueues(fn Function, idle bool) {
	w := a.wakerOf()
	if w == nil || len(fn.Queues) == 0 {
		return
	}
	k := key(fn.Namespace, fn.Name)
	if !idle {
		w.Unpark(k)
		return
	}
	byBroker := map[string][]string{}
	for _, q := range fn.Queues {
		byBroker[q.Broker] = append(byBroker[q.Broker], q.Name)
	}
	w.Park(k, byBroker, func() { a.Poke(context.Background(), time.Now(), fn.Namespace, fn.Name, 1) })
}

func (a *Autoscaler) wakerOf() Waker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waker
}

// RemoveFunction stops scaling a function.
func (a *Autoscaler) RemoveFunction(namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.fns, key(namespace, name))
	a.metrics.forget(namespace, name)
	if a.waker != nil {
		a.waker.Unpark(key(namespace, name))
	}
}

func (a *Autoscaler) get(namespace, name string) *state {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fns[key(namespace, name)]
}

// SetInstances sets the admin addresses of a function's ready instances.
func (a *Autoscaler) SetInstances(namespace, name string, admins []string) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	var coldWait time.Duration
	if len(admins) > 0 && len(st.admins) == 0 && !st.coldSince.IsZero() {
		coldWait, st.coldSince = max(time.Since(st.coldSince), time.Nanosecond), time.Time{}
	}
	if len(admins) > 0 && !st.wokeAt.IsZero() {
		if len(st.admins) == 0 {
			st.startup = time.Since(st.wokeAt)
		}
		st.wokeAt = time.Time{}
	}
	changed := (len(st.admins) == 0) != (len(admins) == 0)
	st.admins = admins
	fn := st.fn
	st.mu.Unlock()
	if coldWait > 0 {
		a.metrics.coldStarted(namespace, name, coldWait)
	}
	if changed {
		a.watchQueues(fn, len(admins) == 0)
	}
}

// StartupTime is how long the function took, the last time it had no
// ready instance and was asked for one, until one was ready: a start from
// zero as this platform sees it (on Kubernetes, scheduling and image pulls
// included). ok is false before the first.
func (a *Autoscaler) StartupTime(namespace, name string) (d time.Duration, ok bool) {
	st := a.get(namespace, name)
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.startup, st.startup > 0
}

// BufferedTTL is how long an activator's count of waiting requests counts
// without a new report. Activators report every second while requests
// wait (and 0 once they are gone); one that stops, gone or cut off, has
// its count expire instead of holding the function up.
const BufferedTTL = 3 * time.Second

// report is one activator's latest count of a function's waiting
// requests. A function has a report per activator that has requests of it
// waiting: a few, so a slice searched in full beats a map.
type report struct {
	activator string
	n         int
	at        time.Time
}

// SetBuffered records how many of a function's requests wait in the
// activator named activator, at now. The function's buffered load is the
// sum over activators of their counts younger than BufferedTTL: with
// several activators each holds part of the demand.
func (a *Autoscaler) SetBuffered(now time.Time, activator, namespace, name string, n int) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	i := slices.IndexFunc(st.buffered, func(r report) bool { return r.activator == activator })
	switch {
	case n == 0 && i >= 0:
		st.buffered = slices.Delete(st.buffered, i, i+1)
	case n == 0:
	case i >= 0:
		st.buffered[i].n, st.buffered[i].at = n, now
	default:
		st.buffered = append(st.buffered, report{activator: activator, n: n, at: now})
	}
	if n > 0 {
		st.waitingLocked(now)
	}
}

// waitingLocked notes that requests wait at now: the start of a cold start
// when no instance is ready. Called with st.mu held.
func (st *state) waitingLocked(now time.Time) {
	if len(st.admins) == 0 && st.coldSince.IsZero() {
		st.coldSince = now
	}
}

// bufferedAt sums the activators' counts that have not expired at now,
// dropping those that have. Called with st.mu held.
func (st *state) bufferedAt(now time.Time) float64 {
	var sum int
	for i := 0; i < len(st.buffered); {
		if r := st.buffered[i]; now.Sub(r.at) < BufferedTTL {
			sum += r.n
			i++
			continue
		}
		st.buffered = slices.Delete(st.buffered, i, i+1)
	}
	return float64(sum)
}

// SetFloor sets the least replicas a function keeps, for cron pre-warm;
// a floor that rises is decided on at once, so the warm-up starts now.
func (a *Autoscaler) SetFloor(namespace, name string, floor int32) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	rose := floor > st.floor
	st.floor = floor
	st.mu.Unlock()
	if rose {
		a.decide(context.Background(), time.Now(), st)
	}
}

// Poke decides for one function at once: a request is waiting for it.
func (a *Autoscaler) Poke(ctx context.Context, now time.Time, namespace, name string, buffered int) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	// The poke counts for this decision only: the buffered count is the
	// activators' to report, and they report nothing (not even 0) for
	// requests served within a second, so a stored poke would keep the
	// function up for good.
	st.decider.Record(now, max(st.bufferedAt(now), float64(buffered)))
	st.waitingLocked(now)
	st.mu.Unlock()
	a.decide(ctx, now, st)
}

// QueueErrors reports, by queue, why the last read of a function's queue
// failed; nil when every read was good.
func (a *Autoscaler) QueueErrors(namespace, name string) map[string]string {
	st := a.get(namespace, name)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out map[string]string
	for q, r := range st.reads {
		if r.failing {
			if out == nil {
				out = map[string]string{}
			}
			out[q] = r.err
		}
	}
	return out
}

// Panicking reports whether the function's last decision was in panic
// mode: a burst against its instances.
func (a *Autoscaler) Panicking(namespace, name string) bool {
	st := a.get(namespace, name)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.panicked
}

// QueueDepth reports the messages ready on all of a function's queues at
// their last good reads.
func (a *Autoscaler) QueueDepth(namespace, name string) int64 {
	st := a.get(namespace, name)
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var n int64
	for _, r := range st.reads {
		n += r.depth
	}
	return n
}

// Scaling is what the autoscaler knows of every function at now, sorted
// by namespace and name.
func (a *Autoscaler) Scaling(now time.Time) []wire.Scaling {
	a.mu.Lock()
	states := make([]*state, 0, len(a.fns))
	for _, st := range a.fns {
		states = append(states, st)
	}
	a.mu.Unlock()
	out := make([]wire.Scaling, 0, len(states))
	for _, st := range states {
		st.mu.Lock()
		s := wire.Scaling{Namespace: st.fn.Namespace, Name: st.fn.Name, Desired: st.desired, Panic: st.panicked,
			Buffered: int(st.bufferedAt(now))}
		for _, r := range st.reads {
			s.QueueDepth += r.depth
		}
		st.mu.Unlock()
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y wire.Scaling) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	return out
}

// SetQueueReader makes the autoscaler read the depth of functions' queues
// with r; without one, queues ask for nothing.
func (a *Autoscaler) SetQueueReader(r QueueReader) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queues = r
}

// Step is one second of work: observe every function, and decide on every
// DecideEvery-th step.
func (a *Autoscaler) Step(ctx context.Context, now time.Time) {
	a.mu.Lock()
	states := make([]*state, 0, len(a.fns))
	for _, st := range a.fns {
		states = append(states, st)
	}
	a.steps++
	a.metrics.steps.Inc()
	decide := a.steps%int(DecideEvery/time.Second) == 1
	if decide {
		a.fresh = nil // decided on now with the others
	}
	queues := a.queues
	a.mu.Unlock()
	a.stepAll(ctx, now, states, queues, decide)
}

// stepFresh observes and decides on the functions added since it last
// ran, the ones still scaled.
func (a *Autoscaler) stepFresh(ctx context.Context, now time.Time) {
	a.mu.Lock()
	fresh := slices.DeleteFunc(a.fresh, func(st *state) bool {
		return a.fns[key(st.fn.Namespace, st.fn.Name)] != st
	})
	a.fresh = nil
	queues := a.queues
	a.mu.Unlock()
	a.stepAll(ctx, now, fresh, queues, true)
}

// stepAll steps the states over a bounded pool of goroutines.
func (a *Autoscaler) stepAll(ctx context.Context, now time.Time, states []*state, queues QueueReader, decide bool) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64 // index of the next state to work on
	)
	for range min(stepWorkers, len(states)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(states); i = int(next.Add(1) - 1) {
				a.stepFunction(ctx, now, states[i], queues, decide)
			}
		})
	}
	wg.Wait()
}

// stepFunction is one function's second: read its queues, observe its load
// and, on a deciding step, decide.
func (a *Autoscaler) stepFunction(ctx context.Context, now time.Time, st *state, queues QueueReader, decide bool) {
	if queues != nil {
		// Messages for a function at zero are decided on at once, like a
		// request waiting: not at the next decision, up to a tick later.
		decide = a.readQueues(ctx, st, queues) || decide
	}
	a.observe(ctx, now, st)
	if decide {
		a.decide(ctx, now, st)
	}
}

func (a *Autoscaler) observe(ctx context.Context, now time.Time, st *state) {
	st.mu.Lock()
	admins := st.admins
	st.mu.Unlock()
	obs, err := a.scraper.Scrape(ctx, admins)
	st.mu.Lock()
	defer st.mu.Unlock()
	switch failing := err != nil; {
	case failing && !st.scrapeFailing:
		a.log.Warn("scrape failed: no load recorded until it works", "namespace", st.fn.Namespace, "function", st.fn.Name, "err", err)
	case !failing && st.scrapeFailing:
		a.log.Info("scrape works again", "namespace", st.fn.Namespace, "function", st.fn.Name)
	}
	st.scrapeFailing = err != nil
	if err != nil {
		return
	}
	load := obs.Concurrency
	if st.fn.Metric == MetricRPS {
		load = obs.RPS
	}
	st.decider.Record(now, load+st.bufferedAt(now))
}

// readQueues reads the depth of a function's queues into what they ask
// for. A queue whose read fails keeps asking for what it did before. It
// reports whether the queues now ask for instances of a function whose
// last decision was none.
func (a *Autoscaler) readQueues(ctx context.Context, st *state, r QueueReader) (woke bool) {
	st.mu.Lock()
	fn := st.fn
	st.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, queueReadTimeout)
	defer cancel()
	depths := make([]int64, len(fn.Queues))
	errs := make([]error, len(fn.Queues))
	for i, q := range fn.Queues {
		depths[i], errs[i] = r.Depth(ctx, q.Broker, q.Name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	reads := make(map[string]queueRead, len(fn.Queues))
	st.queue = 0
	for i, q := range fn.Queues {
		read := st.reads[q.Name]
		switch {
		case errs[i] != nil && !read.failing:
			a.log.Warn("queue depth", "namespace", fn.Namespace, "function", fn.Name, "queue", q.Name, "err", errs[i])
		case errs[i] == nil && read.failing:
			a.log.Info("queue depth read again", "namespace", fn.Namespace, "function", fn.Name, "queue", q.Name)
		}
		read.failing, read.err = errs[i] != nil, ""
		if read.failing {
			read.err = errs[i].Error()
		} else {
			read.desired, read.depth = kpa.QueueDesired(depths[i], q.Target, q.Activation), depths[i]
			// Rare enough (functions with queues, once a second) to
			// look the gauge up each time.
			a.metrics.queueDepth.WithLabelValues(fn.Namespace, fn.Name, q.Name).Set(float64(depths[i]))
		}
		reads[q.Name] = read
		st.queue = max(st.queue, read.desired)
	}
	st.reads = reads
	return st.queue > 0 && st.desired == 0
}

func (a *Autoscaler) decide(ctx context.Context, now time.Time, st *state) {
	st.mu.Lock()
	ready := int32(len(st.admins))
	d, ok := st.decider.Decide(now, ready)
	if !ok {
		a.keepScale(st)
		return
	}
	if st.noData {
		st.noData = false
		a.log.Info("load observed again: deciding", "namespace", st.fn.Namespace, "function", st.fn.Name)
	}
	desired := kpa.Desired(st.fn.Spec, d.Desired, st.queue, st.floor)
	st.desired, st.panicked = desired, d.Panic
	switch {
	case desired == 0:
		st.wokeAt, st.coldSince = time.Time{}, time.Time{}
	case ready == 0 && st.wokeAt.IsZero():
		st.wokeAt = time.Now() // SetInstances, which ends the start, has no clock of its own
	}
	if st.series == nil {
		st.series = a.metrics.series(st.fn.Namespace, st.fn.Name)
	}
	st.series.decided(desired, ready, st.fn.Spec.Max, d.Panic)
	a.writeLocked(ctx, st, ready, d)
}

// writeLocked writes the function's latest decision; it is called with
// st.mu held, and releases it. One write of a function is in flight at a
// time: a decision made meanwhile (a poke's beside a tick's) is left for
// the write in flight to make after its own, so the latest decision always
// lands last, and its caller does not wait.
func (a *Autoscaler) writeLocked(ctx context.Context, st *state, ready int32, d kpa.Decision) {
	st.unwritten = true
	if st.writing {
		st.mu.Unlock()
		return
	}
	st.writing = true
	for st.unwritten {
		st.unwritten = false
		fn, desired, queue, series := st.fn, st.desired, st.queue, st.series
		st.mu.Unlock()
		had, err := a.writer.Scale(ctx, fn.Namespace, fn.Name, desired)
		switch {
		case errors.Is(err, ErrNoWorkload):
			a.log.Debug("scale later", "namespace", fn.Namespace, "function", fn.Name, "desired", desired, "err", err)
		case err != nil:
			a.log.Error("scale", "namespace", fn.Namespace, "function", fn.Name, "desired", desired, "err", err)
		default:
			series.actual.Set(float64(had))
		}
		st.mu.Lock()
		if err == nil && st.written != desired {
			from := st.written
			if from < 0 {
				from = had // the first write
			}
			if from != desired {
				a.log.Info("scaled", "namespace", fn.Namespace, "function", fn.Name, "from", from, "to", desired,
					"had", had, "ready", ready, "queue", queue, "panic", d.Panic, "stable", d.Stable)
			}
			st.written = desired
		}
	}
	st.writing = false
	st.mu.Unlock()
}

// keepScale handles a decision without data: the function keeps its scale
// (nothing is written), the skip is counted, and logged when it starts.
// Called with st.mu held, which it releases.
func (a *Autoscaler) keepScale(st *state) {
	if !st.noData {
		st.noData = true
		a.log.Warn("no load observed for a whole stable window: keeping the current scale",
			"namespace", st.fn.Namespace, "function", st.fn.Name, "desired", st.desired)
	}
	fn := st.fn
	st.mu.Unlock()
	// Looked up here, not kept with the gauges: rare, and a series a
	// function would otherwise carry for ever.
	a.metrics.noData.WithLabelValues(fn.Namespace, fn.Name).Inc()
}

// Run steps every second until ctx ends, and decides on new functions as
// they come.
func (a *Autoscaler) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			a.Step(ctx, now)
		case <-a.wake:
			a.stepFresh(ctx, time.Now())
		}
	}
}
