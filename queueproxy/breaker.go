package queueproxy

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by Breaker.Acquire.
var (
	// ErrQueueFull means capacity and queue are both taken: answer 503.
	ErrQueueFull = errors.New("queue full")
	// ErrQueueTimeout means the deadline passed while waiting: answer 504.
	ErrQueueTimeout = errors.New("timed out waiting for a slot")
	// ErrClientGone means the client hung up while waiting.
	ErrClientGone = errors.New("client gone while waiting for a slot")
)

// Breaker admits at most capacity requests at once and lets at most
// queueDepth more wait, first come first served.
//
// The fast path is one atomic add and a non-blocking channel send. Waiters
// block in the channel's send queue, which the runtime serves in FIFO order
// and hands a released slot to directly, so a newcomer cannot overtake them.
// Waiting is bounded by a pooled timer, not a goroutine.
type Breaker struct {
	slots      chan struct{} // one token per request holding a slot
	pending    atomic.Int64  // holding a slot or waiting for one
	maxPending int64
	timers     sync.Pool
}

// NewBreaker returns a breaker of capacity slots (at least 1) and room
// for queueDepth waiters.
func NewBreaker(capacity, queueDepth int) *Breaker {
	capacity = max(capacity, 1)
	return &Breaker{
		slots:      make(chan struct{}, capacity),
		maxPending: int64(capacity + max(queueDepth, 0)),
	}
}

// Slot is one request's hold on a slot of a Breaker, from Acquire to its
// Release, exactly once: the release is handed out with the slot (as
// Knative's Breaker.Reserve returns it), so that no caller gives back what
// it was not given. A value, so that handing it over allocates nothing.
// The zero Slot holds nothing (no breaker: concurrency unlimited), and its
// Release does nothing.
type Slot struct{ b *Breaker }

// Release gives the slot back: to the first request waiting, if any.
func (s Slot) Release() {
	if s.b == nil {
		return
	}
	<-s.b.slots
	s.b.pending.Add(-1)
}

// Acquire takes a slot, waiting until deadline at most, or until gone is
// closed (nil: never).
func (b *Breaker) Acquire(deadline time.Time, gone <-chan struct{}) (Slot, error) {
	if b.pending.Add(1) > b.maxPending {
		b.pending.Add(-1)
		return Slot{}, ErrQueueFull
	}
	select {
	case b.slots <- struct{}{}:
		return Slot{b}, nil
	default:
	}
	if err := b.wait(deadline, gone); err != nil {
		return Slot{}, err
	}
	return Slot{b}, nil
}

func (b *Breaker) wait(deadline time.Time, gone <-chan struct{}) error {
	d := time.Until(deadline)
	if d <= 0 {
		b.pending.Add(-1)
		return ErrQueueTimeout
	}
	t, _ := b.timers.Get().(*time.Timer)
	if t == nil {
		t = time.NewTimer(d)
	} else {
		t.Reset(d)
	}
	defer b.timers.Put(t)
	select {
	case b.slots <- struct{}{}:
		t.Stop()
		return nil
	case <-t.C:
		b.pending.Add(-1)
		return ErrQueueTimeout
	case <-gone:
		t.Stop()
		b.pending.Add(-1)
		return ErrClientGone
	}
}

// InFlight is the number of slots taken.
func (b *Breaker) InFlight() int { return len(b.slots) }

// Waiting is the number of requests waiting for a slot.
func (b *Breaker) Waiting() int {
	return max(int(b.pending.Load())-len(b.slots), 0)
}

// Capacity is the number of slots.
func (b *Breaker) Capacity() int { return cap(b.slots) }
