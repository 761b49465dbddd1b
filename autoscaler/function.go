package autoscaler

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler/kpa"
)

// Target is what the autoscaler scales: its settings, which the
// signals read as they observe.
type Target struct {
	Namespace, Name string
	Spec            kpa.Spec
	Metric          Metric
	// Queues are the RabbitMQ queues the function consumes: each asks for
	// instances by its depth, read each second with WithQueueReader.
	Queues []Queue
	// RunConcurrency bounds the function's runs attempted at once: what
	// its runs ask for instances for (WithRuns).
	RunConcurrency int
}

// Metric is the load signal a function scales on.
type Metric int

// The metrics of scale.metric.
const (
	MetricConcurrency Metric = iota
	MetricRPS
)

// TargetFor is what the autoscaler needs of a defaulted, valid Function:
// the same translation on Kubernetes and in the local platform, so both
// scale a Function alike.
func TargetFor(fn *v1alpha1.Function) Target {
	s := &fn.Spec.Scale
	out := Target{
		Namespace: fn.Namespace,
		Name:      fn.Name,
		Spec: kpa.Spec{
			Min: s.Min, Max: s.Max, Initial: s.InitialReplicas(),
			Target: float64(s.Target) * float64(s.TargetUtilization) / 100,
		},
	}
	out.RunConcurrency = int(fn.Spec.Async.Concurrency)
	if s.Window != nil {
		out.Spec.StableWindow = s.Window.Duration
	}
	if s.ScaleToZeroGracePeriod != nil {
		out.Spec.ScaleToZeroGrace = s.ScaleToZeroGracePeriod.Duration
	}
	if s.Metric == v1alpha1.MetricRPS {
		out.Metric = MetricRPS
	}
	for _, t := range fn.Spec.Triggers {
		if q := t.RabbitMQ; q != nil && t.IsEnabled() {
			broker := ""
			if q.ConnectionSecret != "" {
				broker = fn.Namespace + "/" + q.ConnectionSecret
			}
			out.Queues = append(out.Queues, Queue{Broker: broker, Name: q.Queue,
				Target: int64(q.TargetQueueLength), Activation: int64(q.ActivationQueueLength)})
		}
	}
	return out
}

// key is a function's key in the autoscaler's maps.
func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// SetFunction adds a function or changes its settings (a new decider:
// history is per setting). A new function is decided on at once by Run.
func (a *Autoscaler) SetFunction(now time.Time, fn Target) {
	st, added := a.add(now, fn)
	idle := true
	if !added {
		idle = st.configure(now, fn)
	}
	st.tellIdle(&fn, idle)
}

// add returns the function's state, made whole before anyone can see it
// when the function is new (added).
func (a *Autoscaler) add(now time.Time, fn Target) (st *state, added bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := key(fn.Namespace, fn.Name)
	if st := a.fns[k]; st != nil {
		return st, false
	}
	st = &state{key: k, fn: &fn, writes: writeState{written: -1}}
	st.http.reset(fn.Spec, now)
	st.signals = make([]Signal, 0, 1+len(a.sources))
	st.signals = append(st.signals, &st.floor)
	for _, src := range a.sources {
		st.signals = append(st.signals, src.Signal(fn.Namespace, fn.Name, a.waking(fn.Namespace, fn.Name)))
	}
	a.fns[k], a.fresh = st, append(a.fresh, st)
	select {
	case a.wake <- struct{}{}:
	default: // Run is woken already
	}
	return st, true
}

// waking is what a signal calls to wake a function: a poke.
func (a *Autoscaler) waking(namespace, name string) func() {
	return func() { a.Poke(context.Background(), time.Now(), namespace, name, 1) }
}

// configure sets new settings, and reports whether no instance is ready.
func (st *state) configure(now time.Time, fn Target) (idle bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.fn = &fn
	st.http.reset(fn.Spec, now)
	return len(st.admins) == 0
}

// tellIdle tells the signals that watch their source for a function with
// no ready instance whether fn has none.
func (st *state) tellIdle(fn *Target, idle bool) {
	for _, s := range st.signals {
		if p, ok := s.(PushSignal); ok {
			p.Idle(fn, idle)
		}
	}
}

// RemoveFunction stops scaling a function.
func (a *Autoscaler) RemoveFunction(namespace, name string) {
	st := a.remove(namespace, name)
	if st == nil {
		return
	}
	for _, s := range st.signals {
		if p, ok := s.(PushSignal); ok {
			p.Close()
		}
	}
}

// remove drops the function and then its series: not under a.mu, which a
// scrape collecting sless_autoscaler_functions waits for while it holds
// the series' lock that forget waits for.
func (a *Autoscaler) remove(namespace, name string) *state {
	st := a.take(namespace, name)
	a.metrics.forget(namespace, name)
	return st
}

func (a *Autoscaler) take(namespace, name string) *state {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.fns[key(namespace, name)]
	delete(a.fns, key(namespace, name))
	return st
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
	fn, coldWait, changed := st.setInstances(admins)
	if coldWait > 0 {
		a.metrics.coldStarted(namespace, name, coldWait)
	}
	if changed {
		st.tellIdle(fn, len(admins) == 0)
	}
}

// setInstances reports the time requests waited when the first instance
// is ready after a cold start, and whether the function went to or from no
// ready instance.
func (st *state) setInstances(admins []string) (fn *Target, coldWait time.Duration, changed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	coldWait = st.timing.instances(len(st.admins), len(admins))
	changed = (len(st.admins) == 0) != (len(admins) == 0)
	st.admins = admins
	return st.fn, coldWait, changed
}
