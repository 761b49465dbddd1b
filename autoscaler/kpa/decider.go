// Package kpa is the autoscaler's pure part: Knative's KPA algorithm, with
// its stable and panic windows, turned into a function's instances
// (Decider), the final number beside queue depth and floors (Desired,
// QueueDesired), and a simulation of instances starting and stopping to
// trace decisions over a load (Simulate). It reads no clock and does no
// I/O: callers pass the time and the load.
package kpa

import (
	"math"
	"time"
)

// Knative KPA's constants, under our names.
const (
	// PanicWindowPercent is the panic window's share of the stable window.
	PanicWindowPercent = 10
	// PanicThreshold is the ratio of panic-desired to ready instances that
	// enters panic mode.
	PanicThreshold = 2.0
	// MaxScaleUpRate bounds one decision's growth, as a multiple of ready.
	MaxScaleUpRate = 1000.0
	// MaxScaleDownRate bounds one decision's shrinking: ready / rate at least.
	MaxScaleDownRate = 2.0
)

// Spec is what the decider needs of a function's scale settings.
type Spec struct {
	Min, Max, Initial int32
	// Target is the per-instance value aimed for: scale.target ×
	// targetUtilization, in requests in flight or requests per second.
	Target float64
	// StableWindow is the window load is averaged over; the panic window
	// is PanicWindowPercent of it.
	StableWindow time.Duration
	// ScaleToZeroGrace is kept after a whole idle stable window.
	ScaleToZeroGrace time.Duration
	// PlainKPA turns off the decider's two refinements over Knative's KPA
	// (at zero the latest second counts; scaling down keeps what the panic
	// window needs), so that Knative's behaviour can be measured beside
	// ours (benchmarks/cmd/bench-autoscaler). Functions never set it.
	PlainKPA bool
}

// Decision is one tick's outcome.
type Decision struct {
	// Desired is the number of instances HTTP load asks for, within
	// [Min, Max].
	Desired int32
	// Panic reports panic mode: scaling on the short window, never down.
	Panic bool
	// Stable and PanicLoad are the averaged loads the decision used.
	Stable, PanicLoad float64
}

// Decider is the KPA algorithm for one function: load is recorded into
// one-second buckets, averaged over a stable and a panic window, and turned
// into a number of instances with Knative's panic mode and rate limits.
// Time always comes from the caller, so tests run without sleeping; state
// is a fixed ring of buckets, one per second of the stable window.
type Decider struct {
	spec    Spec
	buckets []bucket

	panicking      bool
	panicSince     time.Time
	maxPanicPods   int32
	lastActive     time.Time // last second with load above zero
	reachedInitial bool
}

type bucket struct {
	second int64 // Unix second the bucket holds; 0 when empty
	load   float64
	n      int
}

// NewDecider returns a decider for spec, starting at now.
func NewDecider(spec Spec, now time.Time) *Decider {
	size := max(int(spec.StableWindow/time.Second), 1)
	return &Decider{spec: spec, buckets: make([]bucket, size), lastActive: now}
}

// Record adds one observation of the function's total load (requests in
// flight across instances plus those buffered in activators, or requests
// per second) at now. Of several in one second the highest counts: they
// are a scrape and a poke, and averaging a scrape of a function at zero
// with the demand a poke brings a moment later halved that demand.
func (d *Decider) Record(now time.Time, load float64) {
	sec := now.Unix()
	b := &d.buckets[sec%int64(len(d.buckets))]
	if b.second != sec {
		*b = bucket{second: sec}
	}
	b.load = max(b.load, load)
	b.n++
	if load > 0 {
		d.lastActive = now
	}
}

// average is the mean load over the window ending at now, over the seconds
// that have data: seconds never observed (a new function, a missed scrape)
// do not count as idle. ok is false when no second of the window has.
func (d *Decider) average(now time.Time, window time.Duration) (load float64, ok bool) {
	seconds := max(int64(window/time.Second), 1)
	end := now.Unix()
	var sum float64
	var n int64
	for s := end - seconds + 1; s <= end; s++ {
		b := d.buckets[((s%int64(len(d.buckets)))+int64(len(d.buckets)))%int64(len(d.buckets))]
		if b.second == s && b.n > 0 {
			sum += b.load
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// Decide turns the recorded load into a number of instances, given how many
// are ready now. ok is false, and nothing is decided, when the stable
// window holds no observation at all (every scrape failed): no data is not
// an idle function, and deciding on it would scale a busy one to zero, as
// Knative's KPA does not either. The caller keeps the current scale.
func (d *Decider) Decide(now time.Time, ready int32) (dec Decision, ok bool) {
	s := d.spec
	stable, ok := d.average(now, s.StableWindow)
	if !ok {
		return Decision{}, false
	}
	panicLoad, _ := d.average(now, s.StableWindow*PanicWindowPercent/100)
	if ready == 0 && !s.PlainKPA {
		// From zero the demand is concrete (requests waiting in the
		// activator), and averaging it with the idle seconds before
		// would start one instance for a burst that needs ten.
		latest, _ := d.average(now, time.Second)
		stable, panicLoad = max(stable, latest), max(panicLoad, latest)
	}
	dStable := instancesFor(stable, s.Target)
	dPanic := instancesFor(panicLoad, s.Target)

	base := float64(max(ready, 1))
	up := int32(math.Ceil(MaxScaleUpRate * base))
	down := int32(math.Floor(base / MaxScaleDownRate))
	if ready == 0 {
		down = 0
	}
	dStable = min(max(dStable, down), up)
	dPanic = min(max(dPanic, down), up)

	overThreshold := float64(dPanic)/base >= PanicThreshold
	switch {
	case !d.panicking && overThreshold:
		d.panicking, d.panicSince, d.maxPanicPods = true, now, ready
	case d.panicking && overThreshold:
		d.panicSince = now // stay until a whole stable window below
	case d.panicking && now.Sub(d.panicSince) >= s.StableWindow:
		d.panicking, d.maxPanicPods = false, 0
	}

	desired := dStable
	if d.panicking {
		desired = max(dPanic, d.maxPanicPods, ready) // never down in panic
		d.maxPanicPods = desired
	} else if desired < ready && !s.PlainKPA {
		// Scaling down, keep what the last seconds' load needs: the
		// stable average lags behind a load that has just grown.
		desired = max(desired, min(dPanic, ready))
	}
	// Zero only after a whole idle stable window plus the grace period.
	if desired == 0 && ready > 0 && now.Sub(d.lastActive) < s.StableWindow+s.ScaleToZeroGrace {
		desired = 1
	}
	if !d.reachedInitial {
		if ready >= s.Initial {
			d.reachedInitial = true
		} else {
			desired = max(desired, s.Initial)
		}
	}
	return Decision{Desired: min(max(desired, s.Min), s.Max), Panic: d.panicking, Stable: stable, PanicLoad: panicLoad}, true
}

// instancesFor is ⌈load / target⌉, forgiving the rounding of averages: a
// time-weighted load of exactly 3 can come out as 3.0000000000004, which
// must not ask for a fourth instance.
func instancesFor(load, target float64) int32 {
	return int32(math.Ceil(load/target - 1e-9))
}

// Desired combines what a function's signals ask for (the HTTP decision,
// queue depth, the cron floor): clamp(max(asks), min, max).
func Desired(spec Spec, asks ...int32) int32 {
	desired := spec.Min
	for _, n := range asks {
		desired = max(desired, n)
	}
	return min(desired, spec.Max)
}

// QueueDesired is KEDA's QueueLength rule: ⌈ready messages / target⌉, and
// 0 until the queue holds more than activation messages.
func QueueDesired(ready, target, activation int64) int32 {
	if ready <= activation || target <= 0 {
		return 0
	}
	return int32(min((ready+target-1)/target, math.MaxInt32))
}
