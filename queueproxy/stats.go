package queueproxy

import (
	"sync"
	"time"

	"sless.dev/sless/internal/wire"
)

// Stats keeps what the autoscaler reads from an instance: the time-weighted
// average number of requests in the queue-proxy (waiting or at the user
// process, so that demand above capacity shows) and the requests that
// arrived, both since the previous report.
//
// Every method takes the current time, so the arithmetic is tested with a
// fake clock. The critical section is a few additions; BenchmarkStats
// measures it under parallel load.
type Stats struct {
	mu          sync.Mutex
	concurrency int64     // requests in the proxy now
	area        float64   // Σ concurrency × seconds since the last report
	requests    int64     // arrivals since the last report
	changed     time.Time // last time concurrency changed or was reported
	reported    time.Time // start of the current interval
	active      time.Time // last arrival or departure
}

// NewStats starts the first interval at now.
func NewStats(now time.Time) *Stats {
	return &Stats{changed: now, reported: now, active: now}
}

// Concurrency is the number of requests in the proxy now.
func (s *Stats) Concurrency() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.concurrency
}

// IdleFor is how long no request has been in the proxy at now: 0 while one
// is, else the time since the last one left.
func (s *Stats) IdleFor(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.concurrency > 0 {
		return 0
	}
	return now.Sub(s.active)
}

// In records a request entering the proxy.
func (s *Stats) In(now time.Time) {
	s.mu.Lock()
	s.advance(now)
	s.concurrency++
	s.requests++
	s.active = now
	s.mu.Unlock()
}

// Out records a request leaving the proxy.
func (s *Stats) Out(now time.Time) {
	s.mu.Lock()
	s.advance(now)
	s.concurrency--
	s.active = now
	s.mu.Unlock()
}

// advance adds the area under the concurrency curve up to now.
func (s *Stats) advance(now time.Time) {
	if dt := now.Sub(s.changed); dt > 0 {
		s.area += float64(s.concurrency) * dt.Seconds()
		s.changed = now
	}
}

// Report closes the interval at now, returns it as the autoscaler reads
// it (wire.StatsPath) and starts the next. inFlight and queued are copied
// into the report as they are.
func (s *Stats) Report(now time.Time, inFlight, queued int64) wire.Stats {
	s.mu.Lock()
	s.advance(now)
	r := wire.Stats{Requests: s.requests, InFlight: inFlight, Queued: queued}
	if dt := now.Sub(s.reported).Seconds(); dt > 0 {
		r.IntervalSeconds = dt
		r.AverageConcurrency = s.area / dt
	}
	s.area, s.requests, s.reported = 0, 0, now
	s.mu.Unlock()
	return r
}
