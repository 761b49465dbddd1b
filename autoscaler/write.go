package autoscaler

import (
	"context"
	"errors"
)

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

// ErrNotScaledHere is what a ReplicaWriter's error wraps when another
// replica scales the function now (autoscaler/shard): the write is
// refused, as the function is about to be dropped here.
var ErrNotScaledHere = errors.New("another autoscaler replica scales the function now")

// writeState is a function's writing of replicas, part of its state and
// guarded by its mutex. One write of a function is in flight at a time: a
// decision made meanwhile (a poke's beside a tick's) is left for the write
// in flight to make after its own, so the latest decision always lands
// last, and its caller does not wait.
type writeState struct {
	// writing is set while a write is in flight; unwritten while a
	// decision waits for it.
	writing, unwritten bool
	written            int32 // the replicas last written (-1: none yet), logged when they change
}

// decision is what a decision was made of, for the log of its write.
type decision struct {
	ready, signals int32
	panic          bool
	stable         float64
}

// decided notes a decision to write, and reports whether its caller is to
// write it (no write is in flight), taking it. Called with st.mu held.
func (st *state) decided() (p pendingWrite, write bool) {
	st.writes.unwritten = true
	if st.writes.writing {
		return p, false
	}
	st.writes.writing = true
	return st.takeWrite(), true
}

// pendingWrite is a decision taken to be written.
type pendingWrite struct {
	namespace, name string
	desired         int32
	last            decision
	series          *series
}

// takeWrite takes the latest decision to write. Called with st.mu held.
func (st *state) takeWrite() pendingWrite {
	st.writes.unwritten = false
	return pendingWrite{namespace: st.fn.Namespace, name: st.fn.Name, desired: st.desired, last: st.last, series: st.series}
}

// write writes the function's decision p, then each newer one made
// meanwhile, until none waits.
func (a *Autoscaler) write(ctx context.Context, st *state, p pendingWrite) {
	for {
		had, err := a.writer.Scale(ctx, p.namespace, p.name, p.desired)
		switch {
		case errors.Is(err, ErrNoWorkload):
			a.log.Debug("scale later", "namespace", p.namespace, "function", p.name, "desired", p.desired, "err", err)
		case errors.Is(err, ErrNotScaledHere):
			a.log.Info("not written: the function moved to another replica", "namespace", p.namespace, "function", p.name, "desired", p.desired)
		case err != nil:
			a.log.Error("scale", "namespace", p.namespace, "function", p.name, "desired", p.desired, "err", err)
		default:
			p.series.actual.set(float64(had)) // one write at a time
		}
		next, from, changed, more := st.wrote(p.desired, had, err == nil)
		if changed {
			a.log.Info("scaled", "namespace", p.namespace, "function", p.name, "from", from, "to", p.desired,
				"had", had, "ready", p.last.ready, "signals", p.last.signals, "panic", p.last.panic, "stable", p.last.stable)
		}
		if !more {
			return
		}
		p = next
	}
}

// wrote notes a write of desired ended, with had replicas there before if
// it succeeded (ok), and reports from what the replicas changed, if they
// did; then takes the decision made meanwhile, if one waits (more), or
// ends the writing.
func (st *state) wrote(desired, had int32, ok bool) (next pendingWrite, from int32, changed, more bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if from = st.writes.written; ok && from != desired {
		if from < 0 {
			from = had // the first write
		}
		st.writes.written = desired
		changed = from != desired
	}
	if !st.writes.unwritten {
		st.writes.writing = false
		return next, from, changed, false
	}
	return st.takeWrite(), from, changed, true
}
