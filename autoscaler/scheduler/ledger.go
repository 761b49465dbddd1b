package scheduler

import (
	"context"
	"sync"
	"time"
)

// MemoryLedger is the Ledger of one scheduler alone, as in sless dev: it
// forgets at exit, so fires missed while the process was down are not
// caught up.
type MemoryLedger struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// Claim records scheduled as key's last fire, unless it is not after it.
func (l *MemoryLedger) Claim(_ context.Context, key string, scheduled time.Time) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if !scheduled.After(l.last[key]) {
		return false, nil
	}
	l.last[key] = scheduled
	return true, nil
}

// Last is key's last fire claimed, zero when none.
func (l *MemoryLedger) Last(_ context.Context, key string) (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[key], nil
}
