package autoscaler

import (
	"context"
	"time"
)

// Signal is one source of a function's demand for instances, as KEDA's
// Scaler is one trigger of a ScaledObject. Each second the autoscaler
// observes every signal of every function; each decision takes the highest
// of their demands and of the HTTP load's (the KPA's decision over the
// requests scraped and buffered, http.go), clamped to the function's min
// and max.
//
// A signal guards its own state: Desired, and its source's pushes, come at
// any time, Observe included. The autoscaler holds no lock of its own while
// it calls Observe.
type Signal interface {
	// Observe reads the source for fn at now: once a second, never twice
	// at once for one function. ctx ends with the step; a read that may
	// be slow bounds itself further, since it holds up one of the step's
	// workers. It reports whether the source asks for instances (KEDA's
	// activity): a function whose last decision was none is then decided
	// on at once, not at the next decision. fn is shared and never
	// changed (new settings come as a new Target): read it, keep it if
	// need be, never write it.
	Observe(ctx context.Context, now time.Time, fn *Target) (active bool)
	// Desired is how many instances the source asks for, as of its last
	// observation or push. It does not block: it is called while a
	// decision is made.
	Desired() int32
}

// Source is one kind of demand: it makes each function's Signal when the
// function is added, and keeps it while the function is scaled (the
// function's settings, which may change, come with each Observe). wake
// decides on the function at once, as an activator's poke does: a signal
// that learns of demand as it comes calls it (KEDA's PushScaler). New takes
// sources with WithSource.
type Source interface {
	Signal(namespace, name string, wake func()) Signal
}

// PushSignal is a Signal that watches its source itself while its function
// has no ready instance, to call its wake on the first demand rather than
// wait for the next Observe: the queues' parked consumer (queue.go).
type PushSignal interface {
	Signal
	// Idle tells whether fn has no ready instance: when the function is
	// set, and whenever that changes.
	Idle(fn *Target, idle bool)
	// Close stops watching: the function is no longer scaled.
	Close()
}
