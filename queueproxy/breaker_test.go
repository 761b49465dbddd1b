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
				err := b.Acquire(deadline, nil)
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
				b.Release()
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
		if err := b.Acquire(far, nil); err != nil {
			t.Fatal(err)
		}
		results := make(chan error, 2)
		for range 2 {
			go func() { results <- b.Acquire(far, nil) }()
		}
		synctest.Wait()
		if b.Waiting() != 2 {
			t.Fatalf("%d waiting, want 2", b.Waiting())
		}
		if err := b.Acquire(far, nil); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Acquire with the queue full = %v, want ErrQueueFull", err)
		}
		b.Release()
		if err := <-results; err != nil {
			t.Fatalf("waiter = %v", err)
		}
		b.Release()
		if err := <-results; err != nil {
			t.Fatalf("waiter = %v", err)
		}
		b.Release()
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
		if err := b.Acquire(far, nil); err != nil {
			t.Fatal(err)
		}
		order := make(chan int, waiters)
		for i := range waiters {
			go func() {
				if err := b.Acquire(far, nil); err != nil {
					t.Error(err)
				}
				order <- i
			}()
			synctest.Wait() // one after the other into the queue
		}
		for want := range waiters {
			b.Release()
			if got := <-order; got != want {
				t.Fatalf("slot %d went to waiter %d, want %d", want, got, want)
			}
		}
		b.Release()
	})
}

func TestBreakerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBreaker(1, 1)
		if err := b.Acquire(time.Now().Add(time.Minute), nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Acquire(time.Now().Add(20*time.Millisecond), nil); !errors.Is(err, ErrQueueTimeout) {
			t.Fatalf("Acquire past its deadline = %v, want ErrQueueTimeout", err)
		}
		if err := b.Acquire(time.Now().Add(-time.Second), nil); !errors.Is(err, ErrQueueTimeout) {
			t.Fatalf("Acquire with a passed deadline = %v, want ErrQueueTimeout", err)
		}
		if b.Waiting() != 0 {
			t.Errorf("timed-out waiters still counted: %d", b.Waiting())
		}
		b.Release()
		if err := b.Acquire(time.Now().Add(time.Minute), nil); err != nil {
			t.Fatalf("Acquire after the timeouts = %v", err)
		}
	})
}
