package autoscaler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"sless.dev/sless/internal/wire"
)

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

// Scaling is what the autoscaler knows of every function at now, sorted
// by namespace and name.
func (a *Autoscaler) Scaling(now time.Time) []wire.Scaling {
	states := a.all()
	out := make([]wire.Scaling, 0, len(states))
	for _, st := range states {
		s := st.scaling(now)
		if q := st.queues(); q != nil {
			s.QueueDepth = q.depth()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y wire.Scaling) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	return out
}

func (a *Autoscaler) all() []*state {
	a.mu.Lock()
	defer a.mu.Unlock()
	states := make([]*state, 0, len(a.fns))
	for _, st := range a.fns {
		states = append(states, st)
	}
	return states
}

func (st *state) scaling(now time.Time) wire.Scaling {
	st.mu.Lock()
	defer st.mu.Unlock()
	return wire.Scaling{Namespace: st.fn.Namespace, Name: st.fn.Name, Desired: st.desired, Panic: st.panicked,
		Buffered: int(st.buffered.at(now))}
}
