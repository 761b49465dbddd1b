package autoscaler

import "time"

// startTiming follows a function's starts from zero: how long the last
// took (StartupTime), and how long requests waited for one (a cold start,
// counted in sless_cold_starts_total). It is part of the function's state,
// guarded by its mutex.
type startTiming struct {
	// wokeAt is when a decision asked for instances while none was
	// ready; startup is the last time from then to a ready instance.
	wokeAt  time.Time
	startup time.Duration
	// coldSince is when a request first waited (a poke, or a count of
	// requests buffered) while no instance was ready; the first ready
	// instance ends that cold start.
	coldSince time.Time
}

// waitingLocked notes that requests wait at now: the start of a cold start
// when no instance is ready. Called with st.mu held.
func (st *state) waitingLocked(now time.Time) {
	if len(st.admins) == 0 && st.timing.coldSince.IsZero() {
		st.timing.coldSince = now
	}
}

// decided notes a decision: one of none ends any start, one asking for
// instances while none is ready begins one.
func (t *startTiming) decided(desired, ready int32) {
	switch {
	case desired == 0:
		t.wokeAt, t.coldSince = time.Time{}, time.Time{}
	case ready == 0 && t.wokeAt.IsZero():
		t.wokeAt = time.Now() // SetInstances, which ends the start, has no clock of its own
	}
}

// instances notes the ready instances going from had to has, and returns
// how long requests waited when that ends a cold start (0 otherwise).
func (t *startTiming) instances(had, has int) (coldWait time.Duration) {
	if has > 0 && had == 0 && !t.coldSince.IsZero() {
		coldWait, t.coldSince = max(time.Since(t.coldSince), time.Nanosecond), time.Time{}
	}
	if has > 0 && !t.wokeAt.IsZero() {
		if had == 0 {
			t.startup = time.Since(t.wokeAt)
		}
		t.wokeAt = time.Time{}
	}
	return coldWait
}

// StartupTime is how long the function took, the last time it had no
// ready instance and was asked for one, until one was ready: a start from
// zero as this platform sees it (on Kubernetes, scheduling and image pulls
// included). ok is false before the first.
func (a *Autoscaler) StartupTime(namespace, name string) (d time.Duration, ok bool) {
	st := a.get(namespace, name)
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.timing.startup, st.timing.startup > 0
}
