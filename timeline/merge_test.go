package timeline

import (
	"encoding/json"
	"testing"
	"time"
)

// Two activators' timelines, sent as JSON and merged into a third, add up
// to what one activator would have seen of all the invocations.
func TestMerge(t *testing.T) {
	a, b := New(), New()
	a.Sample(t0, "default", "fn", Gauges{Desired: 2, Ready: 1, Buffered: 3})
	b.Sample(t0, "default", "fn", Gauges{Desired: 2, Ready: 1, Buffered: 4, QueueDepth: 9})
	for i := range 60 {
		a.Add(record(t0.Add(time.Duration(i)*time.Second), 2*time.Millisecond, 200, i == 0))
	}
	for i := range 40 {
		status := 200
		if i < 10 {
			status = 502
		}
		b.Add(record(t0.Add(time.Duration(i)*time.Second), 2*time.Second, status, i == 0))
	}
	b.Sample(t0, "other", "g", Gauges{})

	now := t0.Add(2 * time.Minute)
	whole := New()
	for _, tl := range []*Timeline{a, b} {
		raw, err := json.Marshal(tl.Snapshot(now))
		if err != nil {
			t.Fatal(err)
		}
		var s Snapshot
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		whole.Merge(now, s)
	}
	st, ok := whole.Stats(now, "default", "fn", 5*time.Minute)
	if !ok || st.Requests != 100 || st.Errors != 10 || st.ColdStarts != 2 {
		t.Fatalf("merged stats %+v (known %v): want 100 requests, 10 errors, 2 cold starts", st, ok)
	}
	// 60 requests in (1ms, 2.5ms], 40 in (1s, 2.5s]: the merged p99 is in
	// the slow bucket, which neither timeline alone would put it in for a.
	if st.P99Ms == nil || *st.P99Ms < 1000 {
		t.Errorf("merged p99 %v ms, want the slow requests' bucket", st.P99Ms)
	}
	s, _ := whole.Series(now, "default", "fn")
	i := len(s.Time) - 1 - int(now.Sub(t0)/Step)
	if s.Buffered[i] == nil || *s.Buffered[i] != 7 || *s.Desired[i] != 2 || *s.QueueDepth[i] != 9 {
		t.Errorf("merged gauges at t0: buffered %v desired %v depth %v, want 7 (3+4), 2, 9",
			s.Buffered[i], s.Desired[i], s.QueueDepth[i])
	}
	if _, ok := whole.Stats(now, "other", "g", time.Minute); !ok {
		t.Error("a function only one timeline knows is missing from the merge")
	}
	// A snapshot taken long after holds nothing of these steps.
	if late := a.Snapshot(t0.Add(time.Hour)); len(late.Functions) != 1 || len(late.Functions[0].Steps) != 0 {
		t.Errorf("snapshot an hour later: %+v, want fn with no steps", late)
	}
}
