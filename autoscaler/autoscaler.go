package autoscaler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DecideEvery is the tick of decisions; load is observed every second.
const DecideEvery = 2 * time.Second

// ReplicaWriter makes a function's replicas so: the Deployment's scale
// subresource on Kubernetes, the supervisor locally. It returns the
// replicas there were.
type ReplicaWriter interface {
	Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error)
}

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
	Spec            Spec
	Metric          Metric
}

// Autoscaler observes every function's load each second, decides every
// DecideEvery (and at once on a poke) and writes the replicas. All its
// work is Step, called with the time; Run calls it from a ticker.
type Autoscaler struct {
	scraper *Scraper
	writer  ReplicaWriter
	log     *slog.Logger
	metrics *metrics

	mu    sync.Mutex
	fns   map[string]*state
	steps int
}

type state struct {
	fn       Function
	decider  *Decider
	admins   []string // ready instances' queue-proxy admin addresses
	buffered float64  // requests waiting in activators
	floor    int32    // cron pre-warm and queue-depth floors
	desired  int32    // last decision
	mu       sync.Mutex
}

// New returns an autoscaler reading instances with scraper, writing
// replicas with writer and registering its metrics with reg.
func New(scraper *Scraper, writer ReplicaWriter, reg prometheus.Registerer, log *slog.Logger) (*Autoscaler, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Autoscaler{scraper: scraper, writer: writer, log: log, metrics: m, fns: map[string]*state{}}, nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// SetFunction adds a function or changes its settings (a new decider:
// history is per setting).
func (a *Autoscaler) SetFunction(now time.Time, fn Function) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.fns[key(fn.Namespace, fn.Name)]
	if st == nil {
		st = &state{}
		a.fns[key(fn.Namespace, fn.Name)] = st
	}
	st.mu.Lock()
	st.fn, st.decider = fn, NewDecider(fn.Spec, now)
	st.mu.Unlock()
}

// RemoveFunction stops scaling a function.
func (a *Autoscaler) RemoveFunction(namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.fns, key(namespace, name))
	a.metrics.forget(namespace, name)
}

func (a *Autoscaler) get(namespace, name string) *state {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fns[key(namespace, name)]
}

// SetInstances sets the admin addresses of a function's ready instances.
func (a *Autoscaler) SetInstances(namespace, name string, admins []string) {
	if st := a.get(namespace, name); st != nil {
		st.mu.Lock()
		st.admins = admins
		st.mu.Unlock()
	}
}

// SetBuffered sets how many of a function's requests wait in activators.
func (a *Autoscaler) SetBuffered(namespace, name string, n int) {
	if st := a.get(namespace, name); st != nil {
		st.mu.Lock()
		st.buffered = float64(n)
		st.mu.Unlock()
	}
}

// SetFloor sets the least replicas a function keeps, for cron pre-warm
// and queue depth.
func (a *Autoscaler) SetFloor(namespace, name string, floor int32) {
	if st := a.get(namespace, name); st != nil {
		st.mu.Lock()
		st.floor = floor
		st.mu.Unlock()
	}
}

// Poke decides for one function at once: a request is waiting for it.
func (a *Autoscaler) Poke(ctx context.Context, now time.Time, namespace, name string, buffered int) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	st.buffered = max(st.buffered, float64(buffered))
	st.decider.Record(now, st.buffered)
	st.mu.Unlock()
	a.decide(ctx, now, st)
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
	decide := a.steps%int(DecideEvery/time.Second) == 1
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range states {
		wg.Go(func() {
			a.observe(ctx, now, st)
			if decide {
				a.decide(ctx, now, st)
			}
		})
	}
	wg.Wait()
}

func (a *Autoscaler) observe(ctx context.Context, now time.Time, st *state) {
	st.mu.Lock()
	admins := st.admins
	st.mu.Unlock()
	obs, err := a.scraper.Scrape(ctx, admins)
	if err != nil {
		st.mu.Lock()
		a.log.Warn("scrape", "namespace", st.fn.Namespace, "function", st.fn.Name, "err", err)
		st.mu.Unlock()
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	load := obs.Concurrency
	if st.fn.Metric == MetricRPS {
		load = obs.RPS
	}
	st.decider.Record(now, load+st.buffered)
}

func (a *Autoscaler) decide(ctx context.Context, now time.Time, st *state) {
	st.mu.Lock()
	ready := int32(len(st.admins))
	d := st.decider.Decide(now, ready)
	desired := Desired(st.fn.Spec, d.Desired, 0, st.floor)
	changed := desired != st.desired
	st.desired = desired
	fn := st.fn
	st.mu.Unlock()
	a.metrics.decided(fn.Namespace, fn.Name, desired, ready, d.Panic)
	had, err := a.writer.Scale(ctx, fn.Namespace, fn.Name, desired)
	if err != nil {
		a.log.Error("scale", "namespace", fn.Namespace, "function", fn.Name, "desired", desired, "err", err)
		return
	}
	if changed || had != desired {
		a.log.Info("scaled", "namespace", fn.Namespace, "function", fn.Name, "from", had, "to", desired,
			"ready", ready, "panic", d.Panic, "stable", d.Stable)
	}
}

// Run steps every second until ctx ends.
func (a *Autoscaler) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			a.Step(ctx, now)
		}
	}
}
