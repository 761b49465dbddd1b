// Package activator is the front door of every function: it routes
// invocations, throttles them over the function's ready instances, and
// holds them while a function scaled to zero starts.
package activator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by Throttler.Acquire.
var (
	// ErrBufferFull means the function's queue, or the activator's global
	// buffer, is full: answer 503 with Retry-After.
	ErrBufferFull = errors.New("activator buffer full")
	// ErrTimeout means the request's time ran out while waiting: 504.
	ErrTimeout = errors.New("timed out waiting for an instance")
	// ErrCanceled means the client hung up while waiting.
	ErrCanceled = errors.New("client gone while waiting for an instance")
	// ErrUnavailable means the function has no instance and cannot start
	// one (see SetUnavailable): answer 503 with the cause at once.
	ErrUnavailable = errors.New("function unavailable")
	// ErrRemoved means the function was removed (see Close): it will
	// have no instance, so the request is answered 404 at once.
	ErrRemoved = errors.New("function removed")
)

// Buffer bounds the requests waiting across all of an activator's
// functions, so that a flood for one function at zero cannot exhaust the
// activator's memory.
type Buffer struct {
	waiting atomic.Int64
	max     int64
}

// NewBuffer returns a buffer for at most max waiting requests.
func NewBuffer(max int) *Buffer { return &Buffer{max: int64(max)} }

// Waiting is the number of requests waiting in all throttlers.
func (b *Buffer) Waiting() int { return int(b.waiting.Load()) }

// Instance is one ready instance of a function, as the throttler tracks
// it: its address and the requests it is handling.
type Instance struct {
	Addr     string
	inFlight int  // guarded by the throttler's mutex, as are the flags
	removed  bool // out of rotation: gone, or benched
	benched  bool // refused a connection; back after benchTime
}

// benchTime is how long an instance that refused a connection stays out
// of rotation, unless an Update settles it sooner: time enough for the
// endpoint update of an instance that is going, and for one that was
// restarting to listen again. Its return needs no endpoint update, which
// may never come when the refusal was brief.
const benchTime = time.Second

// Throttler admits a function's requests to its ready instances, at most
// this activator's share of the function's concurrency at once on each
// (0: unlimited; see share), choosing between two random instances the one
// with fewer requests in flight. Requests that find no
// free instance wait in a bounded FIFO queue and are handed an instance
// directly when one frees up or appears, so nothing polls.
//
// One mutex guards the instances and the queue; the critical sections are
// a few comparisons and pointer moves.
type Throttler struct {
	maxWaiting int
	buffer     *Buffer
	// poke is called when a request starts waiting while the function
	// has no instance: once per activation, not once per request.
	poke func()

	mu sync.Mutex
	// concurrency is the function's limit per instance; capacity this
	// activator's share of it, on the instances of its share (see share).
	concurrency, capacity int
	peers                 Peers
	all                   []string // every ready instance, sorted
	instances             []*Instance
	benched               []*Instance
	waiters               []*waiter // FIFO; the head is waiters[0]
	poked                 bool      // poke was called since the last instance left
	unavailable           error     // why the function cannot start, if it cannot
	closed                bool      // the function was removed: see Close
	lastPoke              time.Time // of a request refused as unavailable
	rng                   *rand.Rand
}

type waiter struct {
	got chan *Instance // receives the instance; buffered, written once
	err error          // when got receives nil: why no instance comes
}

// NewThrottler returns a throttler for a function whose instances each take
// concurrency requests at once (0: unlimited), with room for maxWaiting
// requests in its queue and in buffer. poke, if not nil, is called when the
// function needs an instance it does not have. It admits the whole
// concurrency until SetPeers says other activators share the instances.
func NewThrottler(concurrency, maxWaiting int, buffer *Buffer, poke func()) *Throttler {
	if poke == nil {
		poke = func() {}
	}
	return &Throttler{
		concurrency: concurrency, capacity: concurrency, maxWaiting: maxWaiting, buffer: buffer, poke: poke,
		peers: Peers{N: 1}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
}

// TryAcquire returns an instance with room, or nil when the request would
// have to wait (none has room, or others are waiting already).
func (t *Throttler) TryAcquire() *Instance {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) > 0 {
		return nil
	}
	in := t.pick()
	if in != nil {
		in.inFlight++
	}
	return in
}

// Acquire returns an instance to send a request to, waiting until one is
// free, timeout fires or gone closes (nil channels never do). cold
// reports that the request waited for a function with no instance. Every
// instance returned must be given back with Release.
func (t *Throttler) Acquire(timeout <-chan time.Time, gone <-chan struct{}) (in *Instance, cold bool, err error) {
	t.mu.Lock()
	if len(t.waiters) == 0 {
		if in := t.pick(); in != nil {
			in.inFlight++
			t.mu.Unlock()
			return in, false, nil
		}
	}
	if t.closed {
		t.mu.Unlock()
		return nil, false, ErrRemoved
	}
	if err := t.unavailableLocked(); err != nil {
		return nil, false, err // unlocked
	}
	if len(t.waiters) >= t.maxWaiting {
		t.mu.Unlock()
		return nil, false, ErrBufferFull
	}
	if t.buffer.waiting.Add(1) > t.buffer.max {
		t.buffer.waiting.Add(-1)
		t.mu.Unlock()
		return nil, false, ErrBufferFull
	}
	w := &waiter{got: make(chan *Instance, 1)}
	cold = len(t.instances) == 0
	t.waiters = append(t.waiters, w)
	pokeNow := cold && !t.poked
	t.poked = t.poked || pokeNow
	t.mu.Unlock()
	if pokeNow {
		t.poke()
	}

	select {
	case in := <-w.got:
		if in == nil {
			return nil, cold, w.err
		}
		return in, cold, nil
	case <-timeout:
		err = ErrTimeout
	case <-gone:
		err = ErrCanceled
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := t.waiterIndex(w); i >= 0 {
		t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
		t.buffer.waiting.Add(-1)
		return nil, cold, err
	}
	// Handed an instance (or refused) while giving up: pass it on.
	if in := <-w.got; in != nil {
		t.releaseLocked(in)
	}
	return nil, cold, err
}

// SetUnavailable makes requests fail at once with err (wrapping
// ErrUnavailable) while the function has no instance in rotation, those
// waiting included: a function whose build failed, or whose instances
// crash before becoming ready, would otherwise hold them to their
// timeout. nil lifts it.
func (t *Throttler) SetUnavailable(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	t.unavailable = err
	if err == nil || len(t.instances) > 0 {
		return
	}
	t.refuseWaitersLocked(err)
}

// Close is the end of a removed function: its instances leave rotation
// (their addresses are returned, as Update's), and the requests waiting,
// and any that reach it later through a route read before the removal,
// get ErrRemoved at once rather than wait to their timeout for an
// instance that will never come.
func (t *Throttler) Close() (gone []string) {
	t.mu.Lock()
	t.closed = true
	t.refuseWaitersLocked(ErrRemoved)
	t.all = nil
	return t.reshareLocked()
}

// refuseWaitersLocked answers every waiting request with err.
func (t *Throttler) refuseWaitersLocked(err error) {
	for _, w := range t.waiters {
		w.err = err
		w.got <- nil
	}
	t.buffer.waiting.Add(-int64(len(t.waiters)))
	clear(t.waiters)
	t.waiters = t.waiters[:0]
}

// unavailableLocked returns why the function cannot take a request, and
// unlocks, or returns nil with the lock still held. A refused request
// pokes the autoscaler, at most once a second, so that a function whose
// instances crash keeps being retried while it is asked for.
func (t *Throttler) unavailableLocked() error {
	if t.unavailable == nil || len(t.instances) > 0 {
		return nil
	}
	err := t.unavailable
	now := time.Now()
	pokeNow := now.Sub(t.lastPoke) >= time.Second
	if pokeNow {
		t.lastPoke = now
	}
	t.mu.Unlock()
	if pokeNow {
		t.poke()
	}
	return err
}

// Release gives back an instance returned by Acquire.
func (t *Throttler) Release(in *Instance) {
	t.mu.Lock()
	t.releaseLocked(in)
	t.mu.Unlock()
}

func (t *Throttler) releaseLocked(in *Instance) {
	in.inFlight--
	if !in.removed {
		t.dispatchLocked()
	}
}

// Refused takes an instance that refused a connection out of rotation
// for benchTime, or until an Update lists it again: it is gone or going
// (its endpoint update is on its way), or restarting. Requests in flight
// on it finish there.
func (t *Throttler) Refused(in *Instance) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if in.removed {
		return
	}
	in.removed, in.benched = true, true
	t.instances = slices.DeleteFunc(t.instances, func(x *Instance) bool { return x == in })
	t.benched = append(t.benched, in)
	time.AfterFunc(benchTime, func() { t.readmit(in) })
}

// readmit puts a benched instance back in rotation, unless an Update has
// settled it meanwhile.
func (t *Throttler) readmit(in *Instance) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !in.benched {
		return
	}
	in.removed, in.benched = false, false
	t.benched = slices.DeleteFunc(t.benched, func(x *Instance) bool { return x == in })
	t.instances = append(t.instances, in)
	t.dispatchLocked()
}

// SetCapacity changes the requests each instance takes at once (0:
// unlimited), in place: requests waiting keep their place, and take the
// new room at once.
func (t *Throttler) SetCapacity(capacity int) {
	t.mu.Lock()
	t.concurrency = capacity
	t.reshareLocked() // unlocks
}

// SetPeers tells the throttler the activators it shares the instances
// with, and returns the addresses that left this activator's share.
func (t *Throttler) SetPeers(p Peers) (gone []string) {
	t.mu.Lock()
	t.peers = p
	return t.reshareLocked()
}

// HasHost reports whether a ready instance is at host (its IP): what
// vouches for a queue-proxy that sends its records.
func (t *Throttler) HasHost(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.all {
		if h, _, err := net.SplitHostPort(a); err == nil && h == host {
			return true
		}
	}
	return false
}

// Update replaces the set of ready instances and returns the addresses
// that left this activator's share of them. Instances that stay keep their
// counts and traffic; removed ones get no new requests; waiting requests
// are handed to the new capacity at once. A benched instance listed comes
// back at once, as a new one.
func (t *Throttler) Update(addrs []string) (gone []string) {
	t.mu.Lock()
	t.all = slices.Sorted(slices.Values(addrs))
	return t.reshareLocked()
}

// reshareLocked puts this activator's share of the instances in rotation,
// at its share of the concurrency, and unlocks.
func (t *Throttler) reshareLocked() (gone []string) {
	first, step, capacity := share(t.concurrency, len(t.all), t.peers)
	t.capacity = capacity
	mine := make([]string, 0, len(t.all)/step+1)
	for j, a := range t.all {
		if j%step == first {
			mine = append(mine, a)
		}
	}
	return t.rotateLocked(mine)
}

// rotateLocked makes addrs the instances in rotation and unlocks.
func (t *Throttler) rotateLocked(addrs []string) (gone []string) {
	old := make(map[string]*Instance, len(t.instances)+len(t.benched))
	for _, in := range t.benched {
		in.benched = false
		old[in.Addr] = nil
	}
	t.benched = t.benched[:0]
	for _, in := range t.instances {
		old[in.Addr] = in
	}
	next := make([]*Instance, 0, len(addrs))
	for _, a := range addrs {
		in := old[a]
		if in == nil {
			in = &Instance{Addr: a}
		}
		delete(old, a)
		next = append(next, in)
	}
	for addr, in := range old {
		if in != nil {
			in.removed = true
		}
		gone = append(gone, addr)
	}
	t.instances = next
	// The last instance left: the next activation needs a poke, now if
	// requests are already waiting.
	pokeNow := len(next) == 0 && len(t.waiters) > 0
	t.poked = pokeNow || len(next) > 0 && t.poked
	t.dispatchLocked()
	t.mu.Unlock()
	if pokeNow {
		t.poke()
	}
	return gone
}

// dispatchLocked hands free capacity to waiters, first come first served.
func (t *Throttler) dispatchLocked() {
	for len(t.waiters) > 0 {
		in := t.pick()
		if in == nil {
			return
		}
		in.inFlight++
		w := t.waiters[0]
		t.waiters[0] = nil
		t.waiters = t.waiters[1:]
		t.buffer.waiting.Add(-1)
		w.got <- in
	}
}

// pick chooses between two random instances with room the one with fewer
// requests in flight, or returns nil when none has room.
func (t *Throttler) pick() *Instance {
	n := len(t.instances)
	if n == 0 {
		return nil
	}
	i := t.rng.IntN(n)
	j := i
	if n > 1 { // two different instances: one sampled twice is no choice
		if j = t.rng.IntN(n - 1); j >= i {
			j++
		}
	}
	a, b := t.instances[i], t.instances[j]
	if b.inFlight < a.inFlight {
		a, b = b, a
	}
	if t.hasRoom(a) {
		return a
	}
	// Both sampled are full (b has at least a's load): look at the rest.
	for _, in := range t.instances {
		if t.hasRoom(in) {
			return in
		}
	}
	return nil
}

func (t *Throttler) hasRoom(in *Instance) bool {
	return t.capacity == 0 || in.inFlight < t.capacity
}

func (t *Throttler) waiterIndex(w *waiter) int {
	for i, x := range t.waiters {
		if x == w {
			return i
		}
	}
	return -1
}

// Waiting is the number of requests in the queue.
func (t *Throttler) Waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters)
}

// Load is the number of instances in rotation and of requests in flight,
// those on benched or removed instances included.
func (t *Throttler) Load() (instances, inFlight int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, in := range t.instances {
		inFlight += in.inFlight
	}
	for _, in := range t.benched {
		inFlight += in.inFlight
	}
	return len(t.instances), inFlight
}
