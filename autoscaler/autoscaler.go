// Package autoscaler decides how many instances each function needs and
// makes it so. A function's demand comes from signals, one file each: the
// HTTP load its instances hold and activators buffer, through the KPA
// (http.go, buffered.go); the depth of its queues (queue.go); the cron
// pre-warm floor (floor.go); and any other Source (signal.go). Every second
// the loop here observes them; every DecideEvery, and at once on a poke, it
// takes the highest demand, clamps it to the function's bounds and writes it
// through a ReplicaWriter (write.go): the Deployment's scale subresource on
// Kubernetes (kubewatch), the supervisor in sless dev.
package autoscaler

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/autoscaler/kpa"
)

// DecideEvery is the tick of decisions; load is observed every second.
const DecideEvery = 2 * time.Second

// stepWorkers bounds the goroutines of a step, which share its functions.
// A goroutine per function cost half of a tick's CPU over 10,000 functions
// (BenchmarkStep10k); this many still wait out as many slow scrapes, queue
// reads or replica writes at once, so a step outlasts their timeout only
// when more functions than this are slow together.
const stepWorkers = 1024

// Autoscaler observes every function's signals each second, decides every
// DecideEvery (and at once on a poke) and writes the replicas. All its work
// is Step, called with the time; Run calls it from a ticker.
type Autoscaler struct {
	scraper *Scraper
	writer  ReplicaWriter
	log     *slog.Logger
	metrics *metrics
	sources []Source // fixed by New
	relay   *relay   // nil without peers

	mu    sync.Mutex
	fns   map[types.NamespacedName]*state
	steps int
	// fresh are the functions added since Run last looked: it decides on
	// them at once, woken by wake, so that a new function's first answer
	// (to KEDA, or its initial instances) does not wait for a tick.
	fresh []*state
	wake  chan struct{}
}

// state is one function's: its signals, and what was decided and written
// of them. The signals guard themselves, but for the HTTP load's two
// (http, buffered), which mu guards with the rest: they are read each tick
// with it.
type state struct {
	key      types.NamespacedName // fixed
	http     httpSignal
	buffered bufferedSignal
	floor    floorSignal
	signals  []Signal // beside HTTP: the floor, then the sources'

	mu       sync.Mutex
	fn       *Target  // replaced whole, never changed: read without a copy
	admins   []string // ready instances' queue-proxy admin addresses
	desired  int32    // last decision
	panicked bool     // the last decision was in panic mode
	last     decision // the last decision's inputs, for the write's log
	timing   startTiming
	series   *series // its gauges, from its first decision
	writes   writeState
}

// Option sets up an Autoscaler in New.
type Option func(*options)

type options struct {
	peers   Peers
	queues  QueueReader
	waker   Waker
	sources []Source
}

// WithSource adds a source of demand: every function gets its signal.
func WithSource(s Source) Option {
	return func(o *options) { o.sources = append(o.sources, s) }
}

// New returns an autoscaler reading instances with scraper, writing
// replicas with writer and registering its metrics with reg.
func New(scraper *Scraper, writer ReplicaWriter, reg prometheus.Registerer, log *slog.Logger, opts ...Option) (*Autoscaler, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &Autoscaler{scraper: scraper, writer: writer, log: log, metrics: m,
		fns: map[types.NamespacedName]*state{}, wake: make(chan struct{}, 1)}
	if o.queues != nil || o.waker != nil {
		a.sources = append(a.sources, &queueSource{reader: o.queues, waker: o.waker, metrics: m, log: log})
	}
	a.sources = append(a.sources, o.sources...)
	if o.peers != nil {
		a.relay = newRelay(o.peers)
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sless_autoscaler_functions", Help: "Functions the autoscaler scales: its share, for a replica of several.",
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

// Step is one second of work: observe every function, and decide on every
// DecideEvery-th step.
func (a *Autoscaler) Step(ctx context.Context, now time.Time) {
	states, decide := a.stepping()
	a.stepAll(ctx, now, states, decide)
}

func (a *Autoscaler) stepping() (states []*state, decide bool) {
	states = a.all()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steps++
	a.metrics.steps.Inc()
	decide = a.steps%int(DecideEvery/time.Second) == 1
	if decide {
		a.fresh = nil // decided on now with the others
	}
	return states, decide
}

// stepFresh observes and decides on the functions added since it last
// ran, the ones still scaled.
func (a *Autoscaler) stepFresh(ctx context.Context, now time.Time) {
	a.stepAll(ctx, now, a.takeFresh(), true)
}

func (a *Autoscaler) takeFresh() []*state {
	a.mu.Lock()
	defer a.mu.Unlock()
	fresh := slices.DeleteFunc(a.fresh, func(st *state) bool {
		return a.fns[st.key] != st
	})
	a.fresh = nil
	return fresh
}

// stepAll steps the states over a bounded pool of goroutines.
func (a *Autoscaler) stepAll(ctx context.Context, now time.Time, states []*state, decide bool) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64 // index of the next state to work on
	)
	for range min(stepWorkers, len(states)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(states); i = int(next.Add(1) - 1) {
				a.stepFunction(ctx, now, states[i], decide)
			}
		})
	}
	wg.Wait()
}

// stepFunction is one function's second: observe its HTTP load, then its
// signals and, on a deciding step, decide.
func (a *Autoscaler) stepFunction(ctx context.Context, now time.Time, st *state, decide bool) {
	fn := a.observeHTTP(ctx, now, st)
	for _, s := range st.signals {
		// Demand for a function at zero is decided on at once, like a
		// request waiting: not at the next decision, up to a tick later.
		if s.Observe(ctx, now, fn) && st.lastDesired() == 0 {
			decide = true
		}
	}
	if decide {
		a.decide(ctx, now, st)
	}
}

func (st *state) lastDesired() int32 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.desired
}

// decide takes the highest demand of the function's signals, clamps it to
// its bounds and writes it.
func (a *Autoscaler) decide(ctx context.Context, now time.Time, st *state) {
	if p, write := a.decision(now, st); write {
		a.write(ctx, st, p)
	}
}

// decision is one decision of the function's replicas. It reports whether
// its caller is to write it, taken: no when there was no decision (no HTTP
// data), or a write in flight will write it after its own.
func (a *Autoscaler) decision(now time.Time, st *state) (p pendingWrite, write bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	ready := int32(len(st.admins))
	d, ok := a.decideHTTP(now, st, ready)
	if !ok {
		return p, false
	}
	var signals int32
	for _, s := range st.signals {
		signals = max(signals, s.Desired())
	}
	desired := kpa.Desired(st.fn.Spec, d.Desired, signals)
	st.desired, st.panicked = desired, d.Panic
	st.last = decision{ready: ready, signals: signals, panic: d.Panic, stable: d.Stable}
	st.timing.decided(desired, ready)
	if st.series == nil {
		st.series = a.metrics.series(st.fn.Namespace, st.fn.Name)
	}
	st.series.decided(desired, ready, st.fn.Spec.Max, d.Panic)
	return st.decided()
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
