package kpa

import (
	"math"
	"time"
)

// Instances is the simple model of a function's instances the simulation
// runs against: asked-for instances become ready StartDelay later, surplus
// ones stop at once (they drain in reality, taking no new load).
type Instances struct {
	StartDelay time.Duration
}

// Sample is one second of a simulation.
type Sample struct {
	Second  int
	Load    float64 // demand: requests in flight or waiting
	Desired int32   // the latest decision
	Ready   int32
}

// Simulate plays a load trace (one value a second) against a decider with
// spec, deciding every tick as the autoscaler does, and returns what the
// function would have looked like second by second. Benchmarks and tests
// read time-to-capacity and over-provisioning from it.
func Simulate(spec Spec, model Instances, tick time.Duration, load []float64) []Sample {
	start := time.Unix(1_700_000_000, 0)
	d := NewDecider(spec, start)
	var (
		ready   int32
		starts  []time.Time // ready times of instances starting
		desired = spec.Initial
		out     = make([]Sample, len(load))
	)
	ticks := max(int(tick/time.Second), 1)
	for i, l := range load {
		now := start.Add(time.Duration(i) * time.Second)
		for len(starts) > 0 && !starts[0].After(now) {
			starts, ready = starts[1:], ready+1
		}
		d.Record(now, l)
		if i%ticks == 0 {
			if dec, ok := d.Decide(now, ready); ok {
				desired = dec.Desired
			}
		}
		switch have := ready + int32(len(starts)); {
		case desired > have:
			for range desired - have {
				starts = append(starts, now.Add(model.StartDelay))
			}
		case desired < have:
			cut := have - desired
			drop := min(cut, int32(len(starts)))
			starts = starts[:int32(len(starts))-drop]
			ready -= cut - drop
		}
		out[i] = Sample{Second: i, Load: l, Desired: desired, Ready: ready}
	}
	return out
}

// TimeToCapacity is the first second from which the ready instances can
// carry the load at target (ready × target ≥ load) without falling short
// again before the trace ends, or -1.
func TimeToCapacity(samples []Sample, target float64) int {
	at := -1
	for _, s := range samples {
		switch {
		case float64(s.Ready)*target < s.Load:
			at = -1
		case at < 0:
			at = s.Second
		}
	}
	return at
}

// OverProvisioning is the mean ratio of ready instances to those the load
// needs at target, over the samples from second from on that have load.
func OverProvisioning(samples []Sample, target float64, from int) float64 {
	var sum float64
	var n int
	for _, s := range samples[from:] {
		if s.Load <= 0 {
			continue
		}
		need := math.Ceil(s.Load / target)
		sum += float64(s.Ready) / need
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// InstanceSeconds is what a simulation costs: its ready instances summed
// over its seconds.
func InstanceSeconds(samples []Sample) int64 {
	var sum int64
	for _, s := range samples {
		sum += int64(s.Ready)
	}
	return sum
}
