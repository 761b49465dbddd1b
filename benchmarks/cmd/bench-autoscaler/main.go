// Command bench-autoscaler plays load traces through the autoscaler's
// simulation harness twice, with sless's decider and with the same decider
// as plain Knative KPA (Spec.PlainKPA), both on Knative's default settings,
// and prints time-to-capacity, cost and over-provisioning side by side as a
// Markdown table for benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-autoscaler [-start-delay 2s]
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
)

func main() {
	startDelay := flag.Duration("start-delay", 2*time.Second, "time an asked-for instance takes to become ready")
	flag.Parse()
	if *startDelay < 0 {
		fmt.Fprintln(os.Stderr, "bench-autoscaler: -start-delay must not be negative")
		os.Exit(2)
	}
	report(os.Stdout, kpa.Instances{StartDelay: *startDelay})
}

// knativeDefaults are Knative's defaults (target 100 at 70% utilization,
// 60 s stable window, scale-to-zero grace 30 s, no max), with initial 0 so
// that every trace starts from a function at zero.
var knativeDefaults = kpa.Spec{
	Max: math.MaxInt32, Target: 70, StableWindow: 60 * time.Second, ScaleToZeroGrace: 30 * time.Second,
}

// trace is a load, one value a second, in requests in flight.
type trace struct {
	name string
	load []float64
	// from is the second from which over-provisioning is measured: after
	// the ramp-up that time-to-capacity measures.
	from int
}

func traces() []trace {
	var ramp []float64 // doubling every 10 s, then held
	for i := range 60 {
		ramp = append(ramp, 35*float64(int(1)<<(i/10)))
	}
	ramp = append(ramp, constant(60, ramp[len(ramp)-1])...)
	// A day in 20 minutes, twice: from nothing to 20 instances' worth.
	diurnal := make([]float64, 2400)
	for i := range diurnal {
		diurnal[i] = 700 * (1 - math.Cos(2*math.Pi*float64(i)/1200))
	}
	return []trace{
		{"step from zero", append(constant(10, 0), constant(120, 700)...), 20},
		{"exponential ramp", ramp, 60},
		{"steady", constant(180, 1400), 60},
		{"spike then quiet", append(append(constant(60, 70), constant(10, 1400)...), constant(120, 70)...), 70},
		{"diurnal sine", diurnal, 0},
	}
}

func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// result is what one trace cost under one configuration.
type result struct {
	capacity int     // time-to-capacity in seconds, -1 when never
	short    int     // seconds with fewer ready instances than the load needs at target
	cost     int64   // ready instance-seconds
	over     float64 // mean ready / needed from the trace's from
}

func measure(spec kpa.Spec, model kpa.Instances, tr trace) result {
	samples := kpa.Simulate(spec, model, autoscaler.DecideEvery, tr.load)
	r := result{
		capacity: kpa.TimeToCapacity(samples, spec.Target),
		cost:     kpa.InstanceSeconds(samples),
		over:     kpa.OverProvisioning(samples, spec.Target, tr.from),
	}
	for _, s := range samples {
		if float64(s.Ready)*spec.Target < s.Load {
			r.short++
		}
	}
	return r
}

func report(w io.Writer, model kpa.Instances) {
	plain := knativeDefaults
	plain.PlainKPA = true
	fmt.Fprintf(w, "Instances ready %s after they are asked for; decisions every %s.\n\n", model.StartDelay, autoscaler.DecideEvery)
	fmt.Fprintln(w, "| trace | config | time to capacity | seconds under target | instance-seconds | over-provisioning |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, tr := range traces() {
		s, k := measure(knativeDefaults, model, tr), measure(plain, model, tr)
		for _, row := range []struct {
			config string
			r      result
		}{{"sless", s}, {"knative", k}} {
			fmt.Fprintf(w, "| %s | %s | %s | %d s | %d | %.2f (from %d s) |\n", tr.name, row.config,
				seconds(row.r.capacity), row.r.short, row.r.cost, row.r.over, tr.from)
		}
		fmt.Fprintf(w, "| %s | sless/knative | %s | %s | %s | %s |\n", tr.name,
			ratio(float64(s.capacity), float64(k.capacity)), ratio(float64(s.short), float64(k.short)),
			ratio(float64(s.cost), float64(k.cost)), ratio(s.over, k.over))
	}
}

func seconds(s int) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%d s", s)
}

// ratio is a/b, or "=" when both are zero and "–" when only b is, or
// either is negative (never reached capacity).
func ratio(a, b float64) string {
	switch {
	case a == 0 && b == 0:
		return "="
	case b <= 0 || a < 0:
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}
