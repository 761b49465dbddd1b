package timeline

import (
	"testing"
	"time"

	"sless.dev/sless/invocation"
)

var t0 = time.Unix(1_800_000_000, 0) // on a step boundary

func record(end time.Time, d time.Duration, status int, cold bool) invocation.Record {
	return invocation.Record{Namespace: "default", Function: "fn", Status: status, Start: end.Add(-d), Duration: d, ColdStart: cold}
}

func TestStats(t *testing.T) {
	tl := New()
	tl.Sample(t0, "default", "fn", Gauges{Desired: 1, Ready: 1})
	tl.Add(record(t0, time.Millisecond, 200, false)) // unknown before the sample: kept now
	for i := range 98 {
		tl.Add(record(t0.Add(time.Duration(i)*time.Second), 2*time.Millisecond, 200, i == 0))
	}
	tl.Add(record(t0.Add(time.Minute), 2*time.Second, 503, false))
	tl.Add(invocation.Record{Namespace: "default", Function: "other", Status: 200, Start: t0}) // never sampled
	tl.Add(record(t0.Add(-10*time.Minute), time.Millisecond, 500, false))                      // before the window

	now := t0.Add(2 * time.Minute)
	st, ok := tl.Stats(now, "default", "fn", 5*time.Minute)
	if !ok {
		t.Fatal("fn unknown")
	}
	if st.Requests != 100 || st.Errors != 1 || st.ColdStarts != 1 {
		t.Fatalf("stats %+v: want 100 requests, 1 error, 1 cold start", st)
	}
	if st.RequestsPerSecond != 100/300.0 || st.ErrorRate != .01 {
		t.Errorf("rate %v, error rate %v: want %v, .01", st.RequestsPerSecond, st.ErrorRate, 100/300.0)
	}
	// 99 requests in (1ms, 2.5ms], one in (1s, 2.5s]: the 99th of 100
	// falls at the top of the first.
	if st.P99Ms == nil || *st.P99Ms != 2.5 {
		t.Errorf("p99 %v ms, want 2.5", st.P99Ms)
	}
	if _, ok := tl.Stats(now, "default", "other", time.Minute); ok {
		t.Error("a function never sampled has stats")
	}
	idle, _ := tl.Stats(t0.Add(time.Hour), "default", "fn", 5*time.Minute)
	if idle.Requests != 0 || idle.P99Ms != nil {
		t.Errorf("an hour later: %+v, want nothing", idle)
	}
}

func TestSeries(t *testing.T) {
	tl := New()
	tl.Sample(t0, "default", "fn", Gauges{Desired: 2, Ready: 1, Buffered: 7, QueueDepth: 40})
	tl.Sample(t0.Add(time.Second), "default", "fn", Gauges{Desired: 2, Ready: 2, Buffered: 3, QueueDepth: 30})
	tl.Add(record(t0.Add(time.Second), 40*time.Millisecond, 200, true))
	// A late record of a step the slot has since been reused for is
	// dropped, not counted in the newer step.
	tl.Add(record(t0.Add(-Span), time.Millisecond, 200, false))

	s, ok := tl.Series(t0.Add(Step), "default", "fn")
	if !ok {
		t.Fatal("fn unknown")
	}
	n := len(s.Time)
	if n != slots || len(s.P99Ms) != n || len(s.Ready) != n || len(s.QueueDepth) != n {
		t.Fatalf("%d steps, columns of %d and %d: want %d each", n, len(s.P99Ms), len(s.Ready), slots)
	}
	at := n - 2 // t0's step; the last is the one after, not sampled yet
	if s.Time[at] != t0.Unix() || s.Time[n-1]-s.Time[at] != int64(Step.Seconds()) {
		t.Fatalf("times end %v, %v: want %v then a step", s.Time[at], s.Time[n-1], t0.Unix())
	}
	if s.RequestsPerSecond[at] != 1/Step.Seconds() || s.ColdStarts[at] != 1 || s.ErrorsPerSecond[at] != 0 {
		t.Errorf("step: %v req/s, %v cold, %v err/s", s.RequestsPerSecond[at], s.ColdStarts[at], s.ErrorsPerSecond[at])
	}
	if s.P50Ms[at] == nil || *s.P50Ms[at] <= 25 || *s.P50Ms[at] > 50 {
		t.Errorf("p50 %v, want within the 40 ms bucket (25, 50]", s.P50Ms[at])
	}
	if *s.Desired[at] != 2 || *s.Ready[at] != 2 || *s.Buffered[at] != 7 || *s.QueueDepth[at] != 30 {
		t.Errorf("gauges %d %d %d %d: want the last 2, 2, the peak 7 buffered, the last depth 30",
			*s.Desired[at], *s.Ready[at], *s.Buffered[at], *s.QueueDepth[at])
	}
	if s.Ready[n-1] != nil || s.P99Ms[n-1] != nil || s.Ready[0] != nil {
		t.Error("steps never sampled or with no requests have values")
	}
}

func TestTrack(t *testing.T) {
	tl := New()
	tl.Add(record(t0, time.Millisecond, 200, false)) // unknown: left out
	tl.Track("default", "fn")
	tl.Add(record(t0, time.Millisecond, 200, false))
	if st, ok := tl.Stats(t0, "default", "fn", time.Minute); !ok || st.Requests != 1 {
		t.Errorf("stats %+v (%v), want the one record after Track", st, ok)
	}
}

func TestRemove(t *testing.T) {
	tl := New()
	tl.Sample(t0, "a", "keep", Gauges{})
	tl.Sample(t0, "a", "drop", Gauges{})
	tl.Remove("a", "drop")
	if _, ok := tl.Series(t0, "a", "drop"); ok {
		t.Error("drop kept")
	}
	if _, ok := tl.Series(t0, "a", "keep"); !ok {
		t.Error("keep dropped")
	}
}

func TestBuckets(t *testing.T) {
	if len(counts{}) != len(buckets)+1 {
		t.Fatalf("a slot counts %d buckets, the duration histograms have %d (and +Inf)", len(counts{}), len(buckets))
	}
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[int]uint32 // bucket index: count
		q      float64
		want   float64
	}{
		{"all in one bucket: its middle", map[int]uint32{1: 10}, .5, .00075},
		{"the top of a bucket", map[int]uint32{0: 99, 14: 1}, .99, .0005},
		{"past the last bound: the last bound", map[int]uint32{15: 3}, .5, 300},
		{"from zero in the first", map[int]uint32{0: 4}, .5, .00025},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := make([]uint32, len(buckets)+1)
			for i, n := range tc.counts {
				counts[i] = n
			}
			if got := quantile(tc.q, counts); got < tc.want-1e-12 || got > tc.want+1e-12 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

// BenchmarkAdd is the cost the console's timeline adds to each record the
// request path sinks, from all cores at once.
func BenchmarkAdd(b *testing.B) {
	tl := New()
	for i := range 100 {
		tl.Sample(time.Now(), "default", "fn"+string(rune('a'+i%26))+string(rune('a'+i/26)), Gauges{})
	}
	r := invocation.Record{Namespace: "default", Function: "fnaa", Status: 200, Start: time.Now(), Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tl.Add(r)
		}
	})
}

// An idle function at zero holds no slots, only the run of steps it was
// sampled at, which its series shows as zeros; its first request makes
// them, keeping those zeros, and a Span of zeros after its last drops
// them again.
func TestIdleHoldsNoSlots(t *testing.T) {
	tl := New()
	for s := range 3 {
		tl.Sample(t0.Add(time.Duration(s)*Step), "default", "fn", Gauges{})
	}
	f := tl.get("default", "fn")
	if f.slots != nil {
		t.Fatal("an idle function holds slots")
	}
	zeros := func(at time.Time, want int) {
		t.Helper()
		s, _ := tl.Series(at, "default", "fn")
		sampled := 0
		for i, d := range s.Desired {
			if d != nil {
				sampled++
				if *d != 0 || *s.Ready[i] != 0 {
					t.Errorf("step %d: desired %d, ready %d, want zeros", i, *d, *s.Ready[i])
				}
			}
		}
		if sampled != want {
			t.Errorf("%d steps sampled, want %d", sampled, want)
		}
	}
	zeros(t0.Add(2*Step), 3)

	tl.Add(record(t0.Add(3*Step), time.Millisecond, 200, false))
	if f.slots == nil {
		t.Fatal("a request made no slots")
	}
	zeros(t0.Add(3*Step), 3)
	if st, _ := tl.Stats(t0.Add(3*Step), "default", "fn", time.Minute); st.Requests != 1 {
		t.Errorf("%d requests, want 1", st.Requests)
	}

	end := t0.Add(3*Step + Span + Step)
	for at := t0.Add(3 * Step); !at.After(end); at = at.Add(Step) {
		tl.Sample(at, "default", "fn", Gauges{})
	}
	if f.slots != nil {
		t.Error("a Span of zeros after the last request kept the slots")
	}
	zeros(end, slots)
	if st, _ := tl.Stats(end, "default", "fn", Span); st.Requests != 0 {
		t.Errorf("%d requests a Span on, want 0", st.Requests)
	}
}
