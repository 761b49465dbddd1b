package kpa

import (
	"testing"
	"time"
)

func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestSimulation plays traces against instances that take 2 s to start and
// checks how fast capacity arrives and how much is wasted.
func TestSimulation(t *testing.T) {
	model := Instances{StartDelay: 2 * time.Second}
	s := spec()
	s.Initial = 0
	tests := []struct {
		name       string
		load       []float64
		maxTTC     int     // seconds to capacity at most
		steadyFrom int     // second from which over-provisioning is measured
		maxOver    float64 // mean ready / needed at most
	}{
		// From zero to ten instances' worth at once: all ten are asked for
		// at the first tick, ready one start-up delay later.
		{"step from zero", append(constant(10, 0), constant(120, 700)...), 10 + 2 + 2, 20, 1.05},
		// A load that doubles every 10 s.
		{"exponential ramp", func() []float64 {
			var l []float64
			for i := range 60 {
				l = append(l, 35*float64(int(1)<<(i/10)))
			}
			return append(l, constant(60, l[len(l)-1])...)
		}(), 60, 60, 1.05},
		{"steady", constant(180, 1400), 8, 60, 1.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			samples := Simulate(s, model, 2*time.Second, tt.load)
			ttc := TimeToCapacity(samples, s.Target)
			if ttc < 0 || ttc > tt.maxTTC {
				t.Errorf("capacity from second %d, want by second %d", ttc, tt.maxTTC)
			}
			if over := OverProvisioning(samples, s.Target, tt.steadyFrom); over < 1 || over > tt.maxOver {
				t.Errorf("over-provisioning %.2f from second %d, want within [1, %.2f]", over, tt.steadyFrom, tt.maxOver)
			}
		})
	}
}

// TestSimulationScalesToZero: after the load stops, instances go to zero
// once the stable window and the grace period have passed.
func TestSimulationScalesToZero(t *testing.T) {
	s := spec()
	samples := Simulate(s, Instances{StartDelay: time.Second}, 2*time.Second, append(constant(30, 140), constant(120, 0)...))
	for _, x := range samples[30 : 30+85] {
		if x.Ready == 0 {
			t.Fatalf("at second %d no instance is ready, want one kept for window + grace", x.Second)
		}
	}
	if last := samples[len(samples)-1]; last.Ready != 0 {
		t.Errorf("at the end %d ready, want 0", last.Ready)
	}
}

func TestInstanceSeconds(t *testing.T) {
	tests := []struct {
		ready []int32
		want  int64
	}{
		{nil, 0}, {[]int32{0, 0}, 0}, {[]int32{1, 3, 2}, 6},
	}
	for _, tt := range tests {
		samples := make([]Sample, len(tt.ready))
		for i, r := range tt.ready {
			samples[i] = Sample{Second: i, Ready: r}
		}
		if got := InstanceSeconds(samples); got != tt.want {
			t.Errorf("InstanceSeconds(ready %v) = %d, want %d", tt.ready, got, tt.want)
		}
	}
}
