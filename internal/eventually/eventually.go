// Package eventually waits, in tests, for what other goroutines and
// processes do: a condition polled until it holds, failing the test after a
// bound, never a fixed sleep. The bounds are generous, since a passing
// test waits only as long as the condition takes; they end a test that
// would otherwise hang.
package eventually

import (
	"testing"
	"time"
)

// Within and Poll are True's bound and how often it looks.
const (
	Within = 30 * time.Second
	Poll   = 10 * time.Millisecond
)

// True polls cond until it holds, failing the test (naming what it waited
// for) when Within passes first.
func True(t testing.TB, what string, cond func() bool) {
	t.Helper()
	TrueWithin(t, Within, what, cond)
}

// TrueWithin is True with another bound: a Go build or a process start can
// take minutes on a loaded machine.
func TrueWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Holds(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Holds polls cond until it holds or within passes, and reports which,
// for a test that says more than the timeout when it fails.
func Holds(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); !cond(); time.Sleep(Poll) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
