package activator

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func never() <-chan struct{} { return nil }

// TestThrottlerCapacityNeverExceeded hammers three instances of capacity 2
// from 64 goroutines and checks no instance ever holds more than 2, and
// that the load spreads over all three.
func TestThrottlerCapacityNeverExceeded(t *testing.T) {
	const capacity, goroutines, rounds = 2, 64, 200
	th := NewThrottler(capacity, goroutines, NewBuffer(goroutines), nil)
	th.Update([]string{"a", "b", "c"})
	var mu sync.Mutex
	holding, peak, served := map[string]int{}, map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				in, _, err := th.Acquire(nil, never())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				holding[in.Addr()]++
				peak[in.Addr()] = max(peak[in.Addr()], holding[in.Addr()])
				served[in.Addr()]++
				mu.Unlock()
				mu.Lock()
				holding[in.Addr()]--
				mu.Unlock()
				in.Release()
			}
		})
	}
	wg.Wait()
	for _, a := range []string{"a", "b", "c"} {
		if peak[a] > capacity {
			t.Errorf("instance %s held %d requests at once, capacity %d", a, peak[a], capacity)
		}
		// The exact spread depends on scheduling here;
		// TestThrottlerLeastLoaded checks the balance itself.
		if share := float64(served[a]) / (goroutines * rounds); share < 0.05 {
			t.Errorf("instance %s served %.0f%% of the requests, want a share", a, 100*share)
		}
	}
	if th.Waiting() != 0 {
		t.Errorf("%d still waiting", th.Waiting())
	}
}

// TestThrottlerLeastLoaded: with no limit, power-of-two choices keeps the
// instances' loads within a few requests of each other.
func TestThrottlerLeastLoaded(t *testing.T) {
	th := NewThrottler(0, 10, NewBuffer(10), nil)
	th.Update([]string{"a", "b", "c", "d"})
	load := map[string]int{}
	for range 400 {
		in, _, err := th.Acquire(nil, never())
		if err != nil {
			t.Fatal(err)
		}
		load[in.Addr()]++
	}
	lo, hi := 400, 0
	for _, n := range load {
		lo, hi = min(lo, n), max(hi, n)
	}
	if len(load) != 4 || hi-lo > 4 {
		t.Errorf("loads %v: want all four within 4 of each other", load)
	}
}

func TestThrottlerQueueBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := NewBuffer(3)
		t1 := NewThrottler(1, 2, buf, nil)
		t2 := NewThrottler(1, 5, buf, nil)
		results := make(chan error, 4)
		wait := func(th *Throttler) {
			go func() {
				_, _, err := th.Acquire(nil, never())
				results <- err
			}()
		}
		wait(t1)
		wait(t1)
		synctest.Wait()
		if t1.Waiting() != 2 {
			t.Fatalf("%d waiting, want 2", t1.Waiting())
		}
		if _, _, err := t1.Acquire(nil, never()); !errors.Is(err, ErrBufferFull) {
			t.Errorf("third waiter of a function with room for 2: %v, want ErrBufferFull", err)
		}
		wait(t2)
		synctest.Wait()
		if t2.Waiting() != 1 {
			t.Fatalf("%d waiting, want 1", t2.Waiting())
		}
		if _, _, err := t2.Acquire(nil, never()); !errors.Is(err, ErrBufferFull) {
			t.Errorf("fourth waiter with a global buffer of 3: %v, want ErrBufferFull", err)
		}
		if buf.Waiting() != 3 {
			t.Errorf("buffer counts %d waiting, want 3", buf.Waiting())
		}
		t1.Update([]string{"a", "a2"}) // one each for its two waiters
		t2.Update([]string{"b"})
		for range 3 {
			if err := <-results; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestThrottlerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := NewBuffer(10)
		th := NewThrottler(1, 10, buf, nil)
		// The timeout is a channel the test fires itself: no clock, no sleep.
		timeout, gone := make(chan time.Time), make(chan struct{})
		done := make(chan error, 2)
		for range 2 {
			go func() {
				_, cold, err := th.Acquire(timeout, gone)
				if !cold {
					t.Error("a request waiting for a function without instances is not cold")
				}
				done <- err
			}()
		}
		synctest.Wait()
		if th.Waiting() != 2 {
			t.Fatalf("%d waiting, want 2", th.Waiting())
		}
		timeout <- time.Now()
		if err := <-done; !errors.Is(err, ErrTimeout) {
			t.Fatalf("Acquire after its timeout = %v, want ErrTimeout", err)
		}
		close(gone)
		if err := <-done; !errors.Is(err, ErrCanceled) {
			t.Fatalf("Acquire after the client left = %v, want ErrCanceled", err)
		}
		if th.Waiting() != 0 || buf.Waiting() != 0 {
			t.Errorf("after giving up: %d waiting, buffer %d; want 0, 0", th.Waiting(), buf.Waiting())
		}
	})
}

// TestThrottlerScaleFromZero: requests that arrive with no instance poke
// once, wait, and are handed the first instance in arrival order as its
// capacity (one request) frees.
func TestThrottlerScaleFromZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var pokes atomic.Int32
		th := NewThrottler(1, 100, NewBuffer(100), func() { pokes.Add(1) })
		const n = 10
		order := make(chan int, n)
		got := make(chan Lease, n)
		for i := range n {
			go func() {
				in, _, err := th.Acquire(nil, never())
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				got <- in
			}()
			synctest.Wait() // it waits, in arrival order
			if th.Waiting() != i+1 {
				t.Fatalf("%d waiting, want %d", th.Waiting(), i+1)
			}
		}
		if pokes.Load() != 1 {
			t.Fatalf("%d pokes for %d waiting requests, want 1", pokes.Load(), n)
		}
		th.Update([]string{"a"})
		for want := range n {
			if want > 0 { // each release lets the next one in
				(<-got).Release()
			}
			if i := <-order; i != want {
				t.Fatalf("request %d got the instance in turn %d", i, want)
			}
		}

		// Scale to zero and back: one more poke.
		(<-got).Release()
		th.Update(nil)
		go func() { _, _, _ = th.Acquire(nil, never()) }()
		synctest.Wait()
		if pokes.Load() != 2 {
			t.Fatalf("%d pokes after scaling to zero and back, want 2", pokes.Load())
		}
		th.Update([]string{"b"})
	})
}

func TestThrottlerRemovedInstanceGetsNoNewRequests(t *testing.T) {
	th := NewThrottler(0, 10, NewBuffer(10), nil)
	th.Update([]string{"a", "b"})
	var held []Lease
	for range 10 {
		in, _, _ := th.Acquire(nil, never())
		held = append(held, in)
	}
	th.Update([]string{"b", "c"})
	for range 20 {
		in, _, _ := th.Acquire(nil, never())
		if in.Addr() == "a" {
			t.Fatal("a request went to a removed instance")
		}
		defer in.Release()
	}
	for _, in := range held {
		in.Release()
	}
	if n, _ := th.Load(); n != 2 {
		t.Errorf("%d instances, want 2", n)
	}
}

func BenchmarkThrottler(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("%d instances", n), func(b *testing.B) {
			th := NewThrottler(1000, 10, NewBuffer(10), nil)
			addrs := make([]string, n)
			for i := range addrs {
				addrs[i] = fmt.Sprint(i)
			}
			th.Update(addrs)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					in, _, err := th.Acquire(nil, never())
					if err != nil {
						b.Error(err)
						return
					}
					in.Release()
				}
			})
		})
	}
}

// BenchmarkWakeOnUpdate measures the activator's share of a cold start:
// from the endpoint update that reports an instance ready to a waiting
// request holding that instance (goal: under 1 ms).
func BenchmarkWakeOnUpdate(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		th := NewThrottler(0, 10, NewBuffer(10), nil)
		got := make(chan time.Time, 1)
		go func() {
			in, _, err := th.Acquire(nil, nil)
			if err != nil || in.in == nil {
				b.Error(err)
			}
			got <- time.Now()
		}()
		for th.Waiting() == 0 {
			runtime.Gosched()
		}
		start := time.Now()
		th.Update([]string{"a"})
		total += (<-got).Sub(start)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/wake")
}

// TestThrottlerBenchesRefused: an instance that refused a connection gets
// no request for benchTime, then comes back by itself, counts kept: the
// endpoint update that would bring it back may never come when its
// refusal was brief.
func TestThrottlerBenchesRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottler(1, 10, NewBuffer(10), nil)
		th.Update([]string{"a"})
		in, _ := th.TryAcquire()
		in.Refused()
		if n, _ := th.Load(); n != 0 {
			t.Fatalf("%d instances in rotation after a refusal, want 0", n)
		}
		got := make(chan Lease, 1)
		go func() {
			in, _, err := th.Acquire(nil, nil)
			if err != nil {
				t.Error(err)
			}
			got <- in
		}()
		time.Sleep(benchTime - time.Millisecond)
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a request went to a benched instance")
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		back := <-got
		if back.in != in.in {
			t.Fatalf("after the bench, the waiter got %v, want the instance back", back.in)
		}
		back.Release()
		if n, inFlight := th.Load(); n != 1 || inFlight != 0 {
			t.Errorf("load %d instances, %d in flight; want 1, 0", n, inFlight)
		}
	})
}

// TestThrottlerUpdateSettlesBench: an Update during a bench decides: a
// listed instance comes back at once (once), an unlisted one is gone
// and stays gone.
func TestThrottlerUpdateSettlesBench(t *testing.T) {
	tests := []struct {
		name      string
		update    []string
		wantGone  []string
		instances int
	}{
		{"listed again", []string{"a", "b"}, nil, 2},
		{"gone", []string{"b"}, []string{"a"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := NewThrottler(0, 10, NewBuffer(10), nil)
				th.Update([]string{"a", "b"})
				for in, _ := th.TryAcquire(); ; in, _ = th.TryAcquire() {
					if in.Addr() == "a" {
						in.Refused()
						break
					}
					in.Release()
				}
				if gone := th.Update(tt.update); !slices.Equal(gone, tt.wantGone) {
					t.Errorf("Update returned gone %v, want %v", gone, tt.wantGone)
				}
				if n, _ := th.Load(); n != tt.instances {
					t.Errorf("%d instances after the update, want %d", n, tt.instances)
				}
				time.Sleep(2 * benchTime)
				synctest.Wait()
				if n, _ := th.Load(); n != tt.instances {
					t.Errorf("%d instances after the bench, want %d: the bench ended twice", n, tt.instances)
				}
			})
		})
	}
}

// TestThrottlerSetCapacity: raising the capacity hands the new room to
// the requests waiting, in place; lowering it admits no more than the new
// capacity.
func TestThrottlerSetCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottler(1, 10, NewBuffer(10), nil)
		th.Update([]string{"a"})
		first, _ := th.TryAcquire()
		done := make(chan Lease, 2)
		for range 2 {
			go func() {
				in, _, err := th.Acquire(nil, nil)
				if err != nil {
					t.Error(err)
				}
				done <- in
			}()
		}
		synctest.Wait()
		if th.Waiting() != 2 {
			t.Fatalf("%d waiting, want 2", th.Waiting())
		}
		th.SetCapacity(3)
		synctest.Wait()
		if th.Waiting() != 0 || len(done) != 2 {
			t.Fatalf("after the resize: %d waiting, %d served; want 0, 2", th.Waiting(), len(done))
		}
		th.SetCapacity(1)
		if _, ok := th.TryAcquire(); ok {
			t.Errorf("admitted a 4th request at capacity 1")
		}
		first.Release()
		(<-done).Release()
		(<-done).Release()
		if _, ok := th.TryAcquire(); !ok {
			t.Errorf("no room at capacity 1 with nothing in flight")
		}
	})
}

// An unavailable function answers at once, waiting requests included,
// while it has no instance; pokes go on, a second apart, so that it is
// retried; an instance, or lifting it, serves again.
func TestThrottlerUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var pokes atomic.Int32
		buf := NewBuffer(100)
		th := NewThrottler(1, 100, buf, func() { pokes.Add(1) })
		errs := make(chan error, 3)
		for range 3 {
			go func() { _, _, err := th.Acquire(nil, never()); errs <- err }()
		}
		synctest.Wait()
		cause := errors.New("crashing: exit status 1")
		th.SetUnavailable(cause)
		for range 3 {
			if err := <-errs; !errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) {
				t.Fatalf("waiting request: %v, want the cause", err)
			}
		}
		if th.Waiting() != 0 || buf.Waiting() != 0 {
			t.Fatalf("%d waiting, %d in the buffer after the refusal, want 0", th.Waiting(), buf.Waiting())
		}
		before := pokes.Load()
		for range 3 {
			if _, _, err := th.Acquire(nil, never()); !errors.Is(err, cause) {
				t.Fatalf("new request: %v, want the cause at once", err)
			}
		}
		if got := pokes.Load() - before; got != 1 {
			t.Errorf("%d pokes for 3 refusals within a second, want 1", got)
		}
		time.Sleep(time.Second)
		_, _, _ = th.Acquire(nil, never())
		if got := pokes.Load() - before; got != 2 {
			t.Errorf("%d pokes a second later, want 2", got)
		}

		th.Update([]string{"a"}) // an instance serves whatever the cause
		in, _, err := th.Acquire(nil, never())
		if err != nil {
			t.Fatalf("with an instance: %v", err)
		}
		in.Release()
		th.Update(nil)
		th.SetUnavailable(nil)
		go func() { _, _, err := th.Acquire(nil, never()); errs <- err }()
		synctest.Wait()
		if th.Waiting() != 1 {
			t.Fatalf("%d waiting once lifted, want 1", th.Waiting())
		}
		th.Update([]string{"a"})
		if err := <-errs; err != nil {
			t.Errorf("once lifted: %v", err)
		}
	})
}

// A removed function's throttler answers its waiting requests at once,
// and any that reach it later, instead of holding them to their timeout;
// its instances leave.
func TestThrottlerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := NewBuffer(100)
		th := NewThrottler(1, 100, buf, nil)
		th.Update([]string{"a"})
		busy, _, err := th.Acquire(nil, never())
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 3)
		for range 3 {
			go func() { _, _, err := th.Acquire(nil, never()); errs <- err }()
		}
		synctest.Wait()
		if gone := th.Close(); !slices.Equal(gone, []string{"a"}) {
			t.Errorf("Close returned %v, want the instance a", gone)
		}
		for range 3 {
			if err := <-errs; !errors.Is(err, ErrRemoved) {
				t.Fatalf("waiting request: %v, want ErrRemoved", err)
			}
		}
		if th.Waiting() != 0 || buf.Waiting() != 0 {
			t.Fatalf("%d waiting, %d in the buffer after Close, want 0", th.Waiting(), buf.Waiting())
		}
		busy.Release() // the request in flight finishes
		if _, _, err := th.Acquire(nil, never()); !errors.Is(err, ErrRemoved) {
			t.Errorf("a request after Close: %v, want ErrRemoved at once", err)
		}
	})
}
