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
// write it (no write is in flight).
func (w *writeState) decided() (write bool) {
	w.unwritten = true
	if w.writing {
		return false
	}
	w.writing = true
	return true
}

// write writes the function's latest decision until no newer one waits.
func (a *Autoscaler) write(ctx context.Context, st *state) {
	for {
		p, ok := st.nextWrite()
		if !ok {
			return
		}
		had, err := a.writer.Scale(ctx, p.fn.Namespace, p.fn.Name, p.desired)
		switch {
		case errors.Is(err, ErrNoWorkload):
			a.log.Debug("scale later", "namespace", p.fn.Namespace, "function", p.fn.Name, "desired", p.desired, "err", err)
		case err != nil:
			a.log.Error("scale", "namespace", p.fn.Namespace, "function", p.fn.Name, "desired", p.desired, "err", err)
		default:
			p.series.actual.Set(float64(had))
			a.wrote(st, p, had)
		}
	}
}

// pendingWrite is a decision taken to be written.
type pendingWrite struct {
	fn      Target
	desired int32
	last    decision
	series  *series
}

// nextWrite takes the latest decision if it is not written yet, and ends
// the write in flight if it is.
func (st *state) nextWrite() (p pendingWrite, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.writes.unwritten {
		st.writes.writing = false
		return p, false
	}
	st.writes.unwritten = false
	return pendingWrite{fn: st.fn, desired: st.desired, last: st.last, series: st.series}, true
}

// wrote notes replicas written, and logs a change.
func (a *Autoscaler) wrote(st *state, p pendingWrite, had int32) {
	from, changed := st.wrote(p.desired, had)
	if changed {
		a.log.Info("scaled", "namespace", p.fn.Namespace, "function", p.fn.Name, "from", from, "to", p.desired,
			"had", had, "ready", p.last.ready, "signals", p.last.signals, "panic", p.last.panic, "stable", p.last.stable)
	}
}

// wrote notes desired written where there were had, and reports from what
// the replicas changed, if they did.
func (st *state) wrote(desired, had int32) (from int32, changed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	from = st.writes.written
	if from == desired {
		return from, false
	}
	if from < 0 {
		from = had // the first write
	}
	st.writes.written = desired
	return from, from != desired
}
