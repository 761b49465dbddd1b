package kpa

import (
	"testing"
	"time"
)

// spec is a function with target 100 × 70% = 70 per instance, a 60 s
// stable window (panic window 6 s) and 30 s of grace.
func spec() Spec {
	return Spec{Min: 0, Max: 100, Initial: 1, Target: 70, StableWindow: 60 * time.Second, ScaleToZeroGrace: 30 * time.Second}
}

var t0 = time.Unix(1_700_000_000, 0)

// step is one second of a trace: the load recorded and the instances ready
// when the decider runs at the end of that second.
type step struct {
	load  float64
	ready int32
}

// run feeds the trace second by second and returns the decisions; every
// second has data, so every decision is made.
func run(t *testing.T, d *Decider, trace []step) []Decision {
	t.Helper()
	out := make([]Decision, len(trace))
	for i, s := range trace {
		now := t0.Add(time.Duration(i) * time.Second)
		d.Record(now, s.load)
		var ok bool
		if out[i], ok = d.Decide(now, s.ready); !ok {
			t.Fatalf("second %d: no decision with data recorded", i)
		}
	}
	return out
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestDecider(t *testing.T) {
	tests := []struct {
		name  string
		spec  func(*Spec)
		trace []step
		// check is called with every decision, and last compared with
		// the final one when there is no check; lastPanic always is.
		last      int32
		lastPanic bool
		check     func(t *testing.T, ds []Decision)
	}{
		{name: "steady load", trace: repeat(120, step{700, 10}), last: 10},
		{name: "steady load, rps metric target", spec: func(s *Spec) { s.Target = 50 }, trace: repeat(90, step{500, 10}), last: 10},
		{name: "ramp follows the load", trace: func() []step {
			var tr []step
			for i := range 120 {
				tr = append(tr, step{float64(7 * i), int32(max(1, (7*i+69)/70))})
			}
			return tr
		}(), check: func(t *testing.T, ds []Decision) {
			if got := ds[len(ds)-1].Desired; got < 8 || got > 12 {
				t.Errorf("at the end of the ramp (load 833) desired %d, want about 9, the stable window's average (626) over 70", got)
			}
		}},
		{name: "step up enters panic", trace: append(repeat(60, step{70, 1}), repeat(3, step{700, 1})...), lastPanic: true,
			check: func(t *testing.T, ds []Decision) {
				if ds[59].Panic || ds[59].Desired != 1 {
					t.Errorf("before the step: %+v, want 1 and no panic", ds[59])
				}
				if !ds[60].Panic || ds[60].Desired < 2 {
					t.Errorf("first second of the step: %+v, want panic and growth", ds[60])
				}
			}},
		{name: "spike then quiet: no scale-down in panic, out after a stable window", trace: append(append(
			repeat(60, step{70, 1}), repeat(10, step{1400, 1})...), repeat(70, step{0, 20})...),
			check: func(t *testing.T, ds []Decision) {
				peak := ds[69].Desired
				for i := 70; i < 69+60; i++ {
					if ds[i].Desired < peak || !ds[i].Panic {
						t.Fatalf("second %d after the spike: %+v, want panic holding %d", i, ds[i], peak)
					}
				}
				if end := ds[len(ds)-1]; end.Panic || end.Desired >= peak {
					t.Errorf("a stable window after the spike: %+v, want out of panic and scaling down", end)
				}
			}},
		{name: "idle goes to zero after window plus grace", trace: append(repeat(10, step{70, 1}), repeat(100, step{0, 1})...),
			check: func(t *testing.T, ds []Decision) {
				// Last load at second 9: one instance kept until 9+60+30.
				for i := 10; i < 99; i++ {
					if ds[i].Desired != 1 {
						t.Fatalf("second %d: desired %d, want 1 before window and grace have passed", i, ds[i].Desired)
					}
				}
				if ds[99].Desired != 0 {
					t.Errorf("second 99 (window + grace after the last load): desired %d, want 0", ds[99].Desired)
				}
			}},
		{name: "min holds when idle", spec: func(s *Spec) { s.Min = 2 }, trace: repeat(200, step{0, 2}), last: 2},
		{name: "max caps, even in panic", spec: func(s *Spec) { s.Max = 5 }, trace: repeat(90, step{7000, 5}), last: 5, lastPanic: true},
		{name: "initial until reached", spec: func(s *Spec) { s.Initial = 3 }, trace: append(repeat(5, step{0, 0}), repeat(5, step{0, 3})...),
			check: func(t *testing.T, ds []Decision) {
				if ds[0].Desired != 3 || ds[4].Desired != 3 {
					t.Errorf("before 3 are ready: %d, %d, want 3", ds[0].Desired, ds[4].Desired)
				}
			}},
		{name: "scale down at most halves", trace: append(repeat(60, step{1400, 20}), repeat(10, step{0, 20})...),
			spec: func(s *Spec) { s.StableWindow = 6 * time.Second }, last: 10},
		{name: "scale from zero on the first request", trace: []step{{0, 0}, {0, 0}, {35, 0}}, spec: func(s *Spec) { s.Initial = 0 },
			check: func(t *testing.T, ds []Decision) {
				if ds[1].Desired != 0 || ds[2].Desired != 1 {
					t.Errorf("decisions %d then %d, want 0 then 1", ds[1].Desired, ds[2].Desired)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := spec()
			if tt.spec != nil {
				tt.spec(&s)
			}
			ds := run(t, NewDecider(s, t0), tt.trace)
			end := ds[len(ds)-1]
			if tt.check != nil {
				tt.check(t, ds)
			} else if end.Desired != tt.last {
				t.Errorf("final decision %+v, want %d", end, tt.last)
			}
			if end.Panic != tt.lastPanic {
				t.Errorf("final decision %+v, want panic %v", end, tt.lastPanic)
			}
		})
	}
}

// TestPlainKPA: each of the two refinements over Knative's KPA changes the
// decision where it applies, and PlainKPA takes it away.
func TestPlainKPA(t *testing.T) {
	tests := []struct {
		name        string
		trace       []step
		ours, plain int32 // final decisions
	}{
		// Averaged with the 5 idle seconds before it, a burst of ten
		// instances' worth at zero asks for 2 (panic window: 700 / 6 s).
		{"from zero, the latest second counts", append(repeat(10, step{0, 0}), step{700, 0}), 10, 2},
		// The stable average (175) lags a load that has grown to 700 on
		// 10 ready instances; KPA halves them.
		{"scaling down keeps what the panic window needs", append(repeat(50, step{70, 10}), repeat(10, step{700, 10})...), 10, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := spec()
			s.Initial = 0
			ours := run(t, NewDecider(s, t0), tt.trace)
			s.PlainKPA = true
			plain := run(t, NewDecider(s, t0), tt.trace)
			if got := ours[len(ours)-1].Desired; got != tt.ours {
				t.Errorf("sless: desired %d, want %d", got, tt.ours)
			}
			if got := plain[len(plain)-1].Desired; got != tt.plain {
				t.Errorf("plain KPA: desired %d, want %d", got, tt.plain)
			}
		})
	}
}

func TestInstancesForForgivesRounding(t *testing.T) {
	tests := []struct {
		load, target float64
		want         int32
	}{
		{3, 1, 3}, {3.0000000000004, 1, 3}, {3.01, 1, 4}, {0, 70, 0}, {70, 70, 1}, {70.5, 70, 2},
	}
	for _, tt := range tests {
		if got := instancesFor(tt.load, tt.target); got != tt.want {
			t.Errorf("instancesFor(%v, %v) = %d, want %d", tt.load, tt.target, got, tt.want)
		}
	}
}

func TestDesiredAndQueue(t *testing.T) {
	s := Spec{Min: 1, Max: 10}
	tests := []struct {
		http, queue, floor, want int32
	}{
		{0, 0, 0, 1}, {3, 5, 0, 5}, {3, 0, 4, 4}, {30, 0, 0, 10},
	}
	for _, tt := range tests {
		if got := Desired(s, tt.http, tt.queue, tt.floor); got != tt.want {
			t.Errorf("Desired(http %d, queue %d, floor %d) = %d, want %d", tt.http, tt.queue, tt.floor, got, tt.want)
		}
	}
	queue := []struct {
		ready, target, activation int64
		want                      int32
	}{
		{0, 5, 0, 0}, {1, 5, 0, 1}, {10, 5, 0, 2}, {11, 5, 0, 3}, {3, 5, 3, 0}, {4, 5, 3, 1},
	}
	for _, tt := range queue {
		if got := QueueDesired(tt.ready, tt.target, tt.activation); got != tt.want {
			t.Errorf("QueueDesired(%d, %d, %d) = %d, want %d", tt.ready, tt.target, tt.activation, got, tt.want)
		}
	}
}

// TestDeciderPokeAfterScrape: at zero, a scrape records no load and the
// activator's poke, a moment later in the same second, the requests
// waiting: the decision is for all of them, not for their average with
// the scrape's zero.
func TestDeciderPokeAfterScrape(t *testing.T) {
	d := NewDecider(spec(), t0)
	d.Record(t0.Add(100*time.Millisecond), 0)
	d.Record(t0.Add(300*time.Millisecond), 500)
	if got, _ := d.Decide(t0.Add(300*time.Millisecond), 0); got.Desired != 8 {
		t.Errorf("500 requests waiting at 70 an instance: desired %d, want 8", got.Desired)
	}
}

// TestDeciderNoData: with no observation in the whole stable window (every
// scrape failed), Decide decides nothing, whatever it decided before; one
// observation is enough to decide again.
func TestDeciderNoData(t *testing.T) {
	d := NewDecider(spec(), t0)
	run(t, d, repeat(60, step{700, 10}))
	for i := 60; i < 60+60+30; i++ {
		if dec, ok := d.Decide(t0.Add(time.Duration(i)*time.Second), 10); ok && i >= 120 {
			t.Fatalf("second %d, a whole window without data: decided %+v, want no decision", i, dec)
		}
	}
	now := t0.Add(150 * time.Second)
	d.Record(now, 700)
	if dec, ok := d.Decide(now, 10); !ok || dec.Desired != 10 {
		t.Errorf("with data again: %+v %v, want 10", dec, ok)
	}
}
