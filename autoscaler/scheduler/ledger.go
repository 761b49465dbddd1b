package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// MemoryLedger is the Ledger of one scheduler alone that forgets at exit,
// so fires missed while the process was down are not caught up: for
// tests.
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

// FileLedger is the Ledger of one scheduler alone that outlives its
// process, as in sless dev: the last fire of each trigger is kept in a
// JSON file, {"namespace/function/trigger": "RFC 3339 time"}, as
// kubeledger keeps them in a ConfigMap, so that fires missed while the
// process was down get their one catch-up fire when it starts again.
type FileLedger struct {
	path string
	mem  MemoryLedger
}

// OpenFileLedger reads the ledger at path (none yet: empty). A file that
// cannot be read or parsed is reported, and the ledger returned anyway,
// empty: its fires are still sent, only the catch-up of fires missed
// before is lost, and the next claim writes the file anew.
func OpenFileLedger(path string) (*FileLedger, error) {
	l := &FileLedger{path: path, mem: MemoryLedger{last: map[string]time.Time{}}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &l.mem.last)
	}
	if err != nil {
		l.mem.last = map[string]time.Time{}
		return l, fmt.Errorf("cron ledger %s: %w", path, err)
	}
	return l, nil
}

// Claim records scheduled as key's last fire, unless it is not after it,
// and writes the file. A fire that cannot be written is not claimed.
func (l *FileLedger) Claim(_ context.Context, key string, scheduled time.Time) (bool, error) {
	l.mem.mu.Lock()
	defer l.mem.mu.Unlock()
	prev, had := l.mem.last[key]
	if !scheduled.After(prev) {
		return false, nil
	}
	l.mem.last[key] = scheduled
	if err := l.writeLocked(); err != nil {
		if had {
			l.mem.last[key] = prev
		} else {
			delete(l.mem.last, key)
		}
		return false, err
	}
	return true, nil
}

// Last is key's last fire claimed, zero when none.
func (l *FileLedger) Last(ctx context.Context, key string) (time.Time, error) {
	return l.mem.Last(ctx, key)
}

// writeLocked replaces the file by a new one, renamed into place, so that
// a crash never leaves half a ledger.
func (l *FileLedger) writeLocked() error {
	b, err := json.Marshal(l.mem.last)
	if err != nil {
		return fmt.Errorf("cron ledger %s: %w", l.path, err)
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return fmt.Errorf("cron ledger: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.path), filepath.Base(l.path)+".*")
	if err != nil {
		return fmt.Errorf("cron ledger: %w", err)
	}
	_, err = tmp.Write(b)
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), l.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("cron ledger %s: %w", l.path, err)
	}
	return nil
}
