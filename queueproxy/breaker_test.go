package queueproxy

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBreakerHammer has many goroutines race for few slots and checks that
// the number holding a slot never exceeds the capacity, and that every
// request either gets a slot or is refused for a full queue.
func TestBreakerHammer(t *testing.T) {
	const capacity, depth, goroutines, rounds = 4, 8, 64, 500
	b := NewBreaker(capacity, depth)
	var holding, peak, admitted, refused atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute)
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				slot, err := b.Acquire(deadline, nil)
				if errors.Is(err, ErrQueueFull) {
					refused.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("Acquire = %v", err)
					return
				}
				n := holding.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				holding.Add(-1)
				admitted.Add(1)
				slot.Release()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > capacity || p < 1 {
		t.Errorf("peak holders = %d, want 1..%d", p, capacity)
	}
	if admitted.Load()+refused.Load() != goroutines*rounds {
		t.Errorf("admitted %d + refused %d != %d requests", admitted.Load(), refused.Load(), goroutines*rounds)
	}
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Errorf("after the storm: %d in flight, %d waiting; want 0, 0", b.InFlight(), b.Waiting())
	}
}

func TestBreakerQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBreaker(1, 2)
		far := time.Now().Add(time.Minute)
		held, err := b.Acquire(far, nil)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			slot Slot
			err  error
		}
		results := make(chan result, 2)
		for range 2 {
			go func() {
				slot, err := b.Acquire(far, nil)
				results <- result{slot, err}
			}()
		}
		synctest.Wait()
		if b.Waiting() != 2 {
			t.Fatalf("%d waiting, want 2", b.Waiting())
		}
		if _, err := b.Acquire(far, nil); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Acquire with the queue full = %v, want ErrQueueFull", err)
		}
		for range 2 {
			held.Release()
			r := <-results
			if r.err != nil {
				t.Fatalf("waiter = %v", r.err)
			}
			held = r.slot
		}
		held.Release()
		if b.InFlight() != 0 || b.Waiting() != 0 {
			t.Errorf("%d in flight, %d waiting; want none", b.InFlight(), b.Waiting())
		}
	})
}

// TestBreakerFIFO releases one slot at a time and checks that waiters get
// it in arrival order. In the bubble, time stands still and the waiters
// enter the queue one by one.
func TestBreakerFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const waiters = 20
		b := NewBreaker(1, waiters)
		far := time.Now().Add(time.Minute)
		held, err := b.Acquire(far, nil)
		if err != nil {
			t.Fatal(err)
		}
		type turn struct {
			waiter int
			slot   Slot
		}
		order := make(chan turn, waiters)
		for i := range waiters {
			go func() {
				slot, err := b.Acquire(far, nil)
				if err != nil {
					t.Error(err)
				}
				order <- turn{i, slot}
			}()
			synctest.Wait() // one after the other into the queue
		}
		for want := range waiters {
			held.Release()
			got := <-order
			if got.waiter != want {
				t.Fatalf("slot %d went to waiter %d, want %d", want, got.waiter, want)
			}
			held = got.slot
		}
		held.Release()
	})
}

func TestBreakerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBreaker(1, 1)
		held, err := b.Acquire(time.Now().Add(time.Minute), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(time.Now().Add(20*time.Millisecond), nil); !errors.Is(err, ErrQueueTimeout) {
			t.Fatalf("Acquire past its deadline = %v, want ErrQueueTimeout", err)
		}
		if _, err := b.Acquire(time.Now().Add(-time.Second), nil); !errors.Is(err, ErrQueueTimeout) {
			t.Fatalf("Acquire with a passed deadline = %v, want ErrQueueTimeout", err)
		}
		if b.Waiting() != 0 {
			t.Errorf("timed-out waiters still counted: %d", b.Waiting())
		}
		held.Release()
		if _, err := b.Acquire(time.Now().Add(time.Minute), nil); err != nil {
			t.Fatalf("Acquire after the timeouts = %v", err)
		}
	})
}
