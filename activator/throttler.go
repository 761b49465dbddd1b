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
// directly when one frees up or appears, so nothing polls. A request
// holds its slot as a Lease, and gives it back through it.
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
	got  chan *Instance // receives the instance; buffered, written once
	err  error          // when got receives nil: why no instance comes
	cold bool           // queued while the function had no instance
}

// Lease is one request's hold on a slot of an instance, from the
// Throttler that admitted it to its Release (or Refused), exactly once:
// the release is handed out with the slot, as Knative's Breaker.Reserve
// does, so that no caller gives back what it was not given. A value, so
// that handing it over allocates nothing. The zero Lease holds nothing,
// and its Release does nothing.
type Lease struct {
	t  *Throttler
	in *Instance
}

// Addr is the address of the instance leased.
func (l Lease) Addr() string { return l.in.Addr }

// Release gives the slot back, handing it to the first request waiting.
func (l Lease) Release() {
	if l.t == nil {
		return
	}
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.t.releaseLocked(l.in)
}

// Refused gives the slot back after the instance refused a connection,
// and takes the instance out of rotation for benchTime, or until an
// Update lists it again: it is gone or going (its endpoint update is on
// its way), or restarting. Requests in flight on it finish there.
func (l Lease) Refused() {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.t.benchLocked(l.in)
	l.t.releaseLocked(l.in)
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

// TryAcquire returns a lease on an instance with room, or false when the
// request would have to wait (none has room, or others are waiting
// already).
func (t *Throttler) TryAcquire() (Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waiters) > 0 {
		return Lease{}, false
	}
	if in := t.takeLocked(); in != nil {
		return Lease{t, in}, true
	}
	return Lease{}, false
}

// Acquire returns a lease on an instance to send a request to, waiting
// until one is free, timeout fires or gone closes (nil channels never
// do). cold reports that the request waited for a function with no
// instance.
func (t *Throttler) Acquire(timeout <-chan time.Time, gone <-chan struct{}) (l Lease, cold bool, err error) {
	in, w, err := t.admit()
	switch {
	case err != nil:
		return Lease{}, false, err
	case w == nil:
		return Lease{t, in}, false, nil
	}
	select {
	case in := <-w.got:
		if in == nil {
			return Lease{}, w.cold, w.err
		}
		return Lease{t, in}, w.cold, nil
	case <-timeout:
		err = ErrTimeout
	case <-gone:
		err = ErrCanceled
	}
	t.abandon(w)
	return Lease{}, w.cold, err
}

// admit takes a slot at once, when one is free and no request waits
// before; else it queues a waiter for one, or says why it cannot. It pokes
// once the lock is released.
func (t *Throttler) admit() (in *Instance, w *waiter, err error) {
	var pokeNow bool
	t.mu.Lock()
	if len(t.waiters) == 0 {
		in = t.takeLocked()
	}
	if in == nil {
		w, pokeNow, err = t.queueLocked()
	}
	t.mu.Unlock()
	if pokeNow {
		t.poke()
	}
	return in, w, err
}

// queueLocked queues a waiter for a slot, or says why it cannot. pokeNow
// reports that the autoscaler must be poked, once the lock is released.
func (t *Throttler) queueLocked() (w *waiter, pokeNow bool, err error) {
	if t.closed {
		return nil, false, ErrRemoved
	}
	if pokeNow, err := t.unavailableLocked(); err != nil {
		return nil, pokeNow, err
	}
	if w = t.enqueueLocked(); w == nil {
		return nil, false, ErrBufferFull
	}
	// The first request to wait for a function with no instance pokes.
	pokeNow = w.cold && !t.poked
	t.poked = t.poked || pokeNow
	return w, pokeNow, nil
}

// enqueueLocked queues a new waiter, counted in the activator's buffer
// until it leaves the queue (dequeueLocked, removeWaiterLocked,
// refuseWaitersLocked), or returns nil when the function's queue or the
// buffer is full.
func (t *Throttler) enqueueLocked() *waiter {
	if len(t.waiters) >= t.maxWaiting {
		return nil
	}
	if t.buffer.waiting.Add(1) > t.buffer.max {
		t.buffer.waiting.Add(-1)
		return nil
	}
	w := &waiter{got: make(chan *Instance, 1), cold: len(t.instances) == 0}
	t.waiters = append(t.waiters, w)
	return w
}

// dequeueLocked takes the first waiter out of the queue.
func (t *Throttler) dequeueLocked() *waiter {
	w := t.waiters[0]
	t.waiters[0] = nil
	t.waiters = t.waiters[1:]
	t.buffer.waiting.Add(-1)
	return w
}

// removeWaiterLocked takes waiter i out of the queue.
func (t *Throttler) removeWaiterLocked(i int) {
	t.waiters = slices.Delete(t.waiters, i, i+1)
	t.buffer.waiting.Add(-1)
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

// abandon takes w out of the queue after its request gave up. An
// instance handed to it meanwhile goes to the next request.
func (t *Throttler) abandon(w *waiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := t.waiterIndex(w); i >= 0 {
		t.removeWaiterLocked(i)
		return
	}
	if in := <-w.got; in != nil {
		t.releaseLocked(in)
	}
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
	return t.reshare(func() {
		t.closed = true
		t.refuseWaitersLocked(ErrRemoved)
		t.all = nil
	})
}

// unavailableLocked returns why the function cannot take a request, if
// it cannot. A refused request pokes the autoscaler (pokeNow), at most
// once a second, so that a function whose instances crash keeps being
// retried while it is asked for.
func (t *Throttler) unavailableLocked() (pokeNow bool, err error) {
	if t.unavailable == nil || len(t.instances) > 0 {
		return false, nil
	}
	now := time.Now()
	pokeNow = now.Sub(t.lastPoke) >= time.Second
	if pokeNow {
		t.lastPoke = now
	}
	return pokeNow, t.unavailable
}

// takeLocked counts a request on the instance pick chooses, if any.
func (t *Throttler) takeLocked() *Instance {
	in := t.pick()
	if in != nil {
		in.inFlight++
	}
	return in
}

func (t *Throttler) releaseLocked(in *Instance) {
	in.inFlight--
	if !in.removed {
		t.dispatchLocked()
	}
}

// benchLocked takes an instance that refused a connection out of
// rotation (see Lease.Refused).
func (t *Throttler) benchLocked(in *Instance) {
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
	t.reshare(func() { t.concurrency = capacity })
}

// SetPeers tells the throttler the activators it shares the instances
// with, and returns the addresses that left this activator's share.
func (t *Throttler) SetPeers(p Peers) (gone []string) {
	return t.reshare(func() { t.peers = p })
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
	all := slices.Sorted(slices.Values(addrs))
	return t.reshare(func() { t.all = all })
}

// reshare applies change under the lock, then puts this activator's share
// of the instances in rotation, at its share of the concurrency, and
// returns the addresses that left it. It pokes once the lock is released.
func (t *Throttler) reshare(change func()) (gone []string) {
	t.mu.Lock()
	change()
	first, step, capacity := share(t.concurrency, len(t.all), t.peers)
	t.capacity = capacity
	mine := make([]string, 0, len(t.all)/step+1)
	for j, a := range t.all {
		if j%step == first {
			mine = append(mine, a)
		}
	}
	gone, pokeNow := t.rotateLocked(mine)
	t.mu.Unlock()
	if pokeNow {
		t.poke()
	}
	return gone
}

// rotateLocked makes addrs the instances in rotation. pokeNow reports that
// the last instance left while requests wait: the autoscaler must be
// poked, once the lock is released.
func (t *Throttler) rotateLocked(addrs []string) (gone []string, pokeNow bool) {
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
	pokeNow = len(next) == 0 && len(t.waiters) > 0
	t.poked = pokeNow || len(next) > 0 && t.poked
	t.dispatchLocked()
	return gone, pokeNow
}

// dispatchLocked hands free capacity to waiters, first come first served.
func (t *Throttler) dispatchLocked() {
	for len(t.waiters) > 0 {
		in := t.takeLocked()
		if in == nil {
			return
		}
		t.dequeueLocked().got <- in
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
