package load

import (
	"strings"
	"testing"
	"time"
)

func TestParseSteps(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		want  []Step
		fixed bool
		err   string
	}{
		{spec: "500", want: []Step{{From: 500, To: 500}}, fixed: true},
		{spec: "0:500:30s,500:500:1m", want: []Step{{0, 500, 30 * time.Second}, {500, 500, time.Minute}}},
		{spec: "0", err: "positive number"},
		{spec: "-3", err: "positive number"},
		{spec: "0:500", err: "want from:to:duration"},
		{spec: "a:500:1s", err: "must be numbers"},
		{spec: "0:500:soon", err: "not a positive duration"},
		{spec: "0:0:1s", err: "sends nothing"},
		{spec: "10:10:-1s", err: "not a positive duration"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, fixed, err := ParseSteps(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || fixed != tc.fixed || len(got) != len(tc.want) {
				t.Fatalf("%v %v %v, want %v", got, fixed, err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("step %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// The schedule's send times follow the rate's integral: a ramp from 0 to
// 100/s over 10 s holds 500 requests, the k-th due at sqrt(k/5) s.
func TestScheduleRamp(t *testing.T) {
	s, err := newSchedule([]Step{{From: 0, To: 100, For: 10 * time.Second}, {From: 100, To: 100, For: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		k    int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true}, {5, time.Second, true}, {125, 5 * time.Second, true}, {499, 9990 * time.Millisecond, true},
		{500, 10 * time.Second, true}, {550, 10500 * time.Millisecond, true}, {600, 0, false},
	} {
		got, ok := s.at(tc.k)
		if ok != tc.ok || (ok && (got < tc.want-time.Millisecond || got > tc.want+time.Millisecond)) {
			t.Errorf("request %d at %v (%v), want %v (%v)", tc.k, got, ok, tc.want, tc.ok)
		}
	}
}
