package queueproxy

import (
	"math"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type event struct {
		ms int
		in bool
	}
	tests := []struct {
		name         string
		events       []event
		reportMS     int
		wantAvg      float64
		wantRequests int64
	}{
		{"idle", nil, 1000, 0, 0},
		{"one request the whole second", []event{{0, true}}, 1000, 1, 1},
		{"one request half the second", []event{{0, true}, {500, false}}, 1000, 0.5, 1},
		{"two overlapping", []event{{0, true}, {250, true}, {750, false}, {1000, false}}, 1000, 1.5, 2},
		{"staircase", []event{{0, true}, {100, true}, {200, true}, {300, false}, {400, false}, {500, false}}, 1000, 0.1 + 0.2 + 0.3 + 0.2 + 0.1, 3},
		{"two seconds, one busy", []event{{1000, true}}, 2000, 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStats(t0)
			for _, e := range tt.events {
				if e.in {
					s.In(at(e.ms))
				} else {
					s.Out(at(e.ms))
				}
			}
			r := s.Report(at(tt.reportMS), 7, 3)
			if math.Abs(r.AverageConcurrency-tt.wantAvg) > 1e-9 || r.Requests != tt.wantRequests {
				t.Errorf("report = %+v, want average %v and %d requests", r, tt.wantAvg, tt.wantRequests)
			}
			if r.InFlight != 7 || r.Queued != 3 || r.IntervalSeconds != float64(tt.reportMS)/1000 {
				t.Errorf("report = %+v, want inFlight 7, queued 3, interval %vs", r, float64(tt.reportMS)/1000)
			}
		})
	}
}

// TestStatsIntervals checks that a report starts a new interval and that a
// request in flight across reports counts in both.
func TestStatsIntervals(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	s := NewStats(t0)
	s.In(t0.Add(500 * time.Millisecond))
	r1 := s.Report(t0.Add(time.Second), 1, 0)
	r2 := s.Report(t0.Add(3*time.Second), 1, 0)
	s.Out(t0.Add(3500 * time.Millisecond))
	r3 := s.Report(t0.Add(4*time.Second), 0, 0)
	if r1.AverageConcurrency != 0.5 || r1.Requests != 1 {
		t.Errorf("first interval %+v, want 0.5 and 1 request", r1)
	}
	if r2.AverageConcurrency != 1 || r2.Requests != 0 || r2.IntervalSeconds != 2 {
		t.Errorf("second interval %+v, want 1 over 2s and no new request", r2)
	}
	if r3.AverageConcurrency != 0.5 {
		t.Errorf("third interval %+v, want 0.5", r3)
	}
	if idle := s.IdleFor(t0.Add(5 * time.Second)); idle != 1500*time.Millisecond {
		t.Errorf("IdleFor = %v, want 1.5s since the last departure", idle)
	}
}
