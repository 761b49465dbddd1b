package autoscaler

import (
	"context"
	"sync/atomic"
	"time"
)

// floorSignal is the least replicas a function keeps for cron pre-warm:
// set by the scheduler (package scheduler) from preWarm before a fire
// until it is answered. It is pushed, never read.
type floorSignal struct{ n atomic.Int32 }

// Observe has nothing to read: a rising floor is decided on as it is set.
func (*floorSignal) Observe(context.Context, time.Time, *Target) bool { return false }

func (f *floorSignal) Desired() int32 { return f.n.Load() }

// SetFloor sets the least replicas a function keeps, for cron pre-warm;
// a floor that rises is decided on at once, so the warm-up starts now.
func (a *Autoscaler) SetFloor(namespace, name string, floor int32) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	if floor > st.floor.n.Swap(floor) {
		a.decide(context.Background(), time.Now(), st)
	}
}
