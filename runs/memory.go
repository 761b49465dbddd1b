package runs

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/sha256"
	"slices"
	"sync"
	"time"

	"sless.dev/sless/invocation"
)

// Defaults of the stores.
const (
	DefaultKeyWindow = 24 * time.Hour
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxRuns and DefaultMaxBytes bound the in-memory store: its
	// runs, and the bytes of their requests and results.
	DefaultMaxRuns  = 100_000
	DefaultMaxBytes = 512 << 20
)

// Memory keeps runs in the process: `sless dev` without a database. What
// it holds ends with the process. It holds at most MaxRuns, whose requests
// and results hold at most MaxBytes (a run's request is dropped as it
// ends), and as many idempotency keys as runs: a full store drops its
// oldest ended runs for a new one, and refuses one (ErrFull) when what it
// holds is still queued or running, or its answer waits to be published.
type Memory struct {
	// KeyWindow, Retention, MaxRuns and MaxBytes default to
	// DefaultKeyWindow, DefaultRetention, DefaultMaxRuns and
	// DefaultMaxBytes; set before first use.
	KeyWindow, Retention time.Duration
	MaxRuns              int
	MaxBytes             int64

	mu        sync.Mutex
	runs      map[ID]*entry
	functions map[functionKey]*queue
	keys      map[idempotencyKey]keyUse
	ended     []ID // in the order runs ended, the oldest first; may name runs gone
	// unpublished are the ended runs whose answers wait to be published,
	// in the order they ended: they join ended once published, not to be
	// dropped before.
	unpublished []ID
	// publishing is held by Publish, so that one send at a time has an
	// answer.
	publishing sync.Mutex
	seq        uint64
	bytes      int64 // of the requests and results held
}

type functionKey struct{ namespace, name string }

type idempotencyKey struct {
	function functionKey
	key      string
}

type keyUse struct {
	run    ID
	digest [sha256.Size]byte
	at     time.Time
}

// entry is a run with what only the store sees.
type entry struct {
	run        Run
	request    Request
	result     Result
	notBefore  time.Time // a queued run's next attempt
	leaseUntil time.Time // a running run's lease
	expiresAt  time.Time // a queued run expires then
	seq        uint64    // submission order, among runs due at once
	index      int       // in its function's queue while queued, -1 otherwise
}

// queue is a function's queued runs, the first due first, and its runs
// running.
type queue struct {
	due     dueHeap
	running map[ID]*entry
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{runs: map[ID]*entry{}, functions: map[functionKey]*queue{}, keys: map[idempotencyKey]keyUse{}}
}

func (m *Memory) queue(k functionKey) *queue {
	q := m.functions[k]
	if q == nil {
		q = &queue{running: map[ID]*entry{}}
		m.functions[k] = q
	}
	return q
}

// Submit implements Store.
func (m *Memory) Submit(_ context.Context, s Submission) (Run, bool, error) {
	now := time.Now()
	fn := functionKey{s.Namespace, s.Function}
	digest := Digest(&s.Request)
	m.mu.Lock()
	defer m.mu.Unlock()
	key := idempotencyKey{fn, s.IdempotencyKey}
	if s.IdempotencyKey != "" {
		if use, ok := m.keys[key]; ok && now.Sub(use.at) < cmp.Or(m.KeyWindow, DefaultKeyWindow) {
			if use.digest != digest {
				return Run{}, false, ErrKeyConflict
			}
			if e, ok := m.runs[use.run]; ok {
				return e.run, false, nil
			}
		}
	}
	if s.IdempotencyKey != "" && len(m.keys) >= cmp.Or(m.MaxRuns, DefaultMaxRuns) {
		m.forgetKeys(now)
		if len(m.keys) >= cmp.Or(m.MaxRuns, DefaultMaxRuns) {
			return Run{}, false, ErrFull
		}
	}
	e, err := m.add(s, now)
	if err != nil {
		return Run{}, false, err
	}
	if s.IdempotencyKey != "" {
		m.keys[key] = keyUse{run: e.run.ID, digest: digest, at: now}
	}
	return e.run, true, nil
}

// add queues a run; m.mu is held.
func (m *Memory) add(s Submission, now time.Time) (*entry, error) {
	size := requestSize(&s.Request)
	if !m.makeRoom(size) {
		return nil, ErrFull
	}
	m.seq++
	m.bytes += size
	e := &entry{run: Run{ID: NewID(), Namespace: s.Namespace, Function: s.Function, State: Queued, CreatedAt: now,
		Parent: s.Parent, Depth: s.Depth}, request: s.Request, notBefore: now, expiresAt: now.Add(s.MaxAge), seq: m.seq}
	m.runs[e.run.ID] = e
	heap.Push(&m.queue(functionKey{s.Namespace, s.Function}).due, e)
	return e, nil
}

// makeRoom drops the oldest ended runs until one more, of size bytes,
// fits; false when it does not fit.
func (m *Memory) makeRoom(size int64) bool {
	for len(m.runs) >= cmp.Or(m.MaxRuns, DefaultMaxRuns) || m.bytes+size > cmp.Or(m.MaxBytes, DefaultMaxBytes) {
		if len(m.ended) == 0 {
			return false
		}
		m.drop(m.ended[0])
		m.ended = m.ended[1:]
	}
	return true
}

// drop forgets an ended run.
func (m *Memory) drop(id ID) {
	if e, ok := m.runs[id]; ok {
		m.bytes -= int64(len(e.result.Body))
		delete(m.runs, id)
	}
}

// requestSize is what a request holds, roughly: its body, path and fields.
func requestSize(r *Request) int64 {
	n := len(r.Body) + len(r.Path)
	for _, f := range r.Header {
		n += len(f[0]) + len(f[1])
	}
	return int64(n)
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id ID) (Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.runs[id]
	if !ok {
		return Run{}, ErrNotFound
	}
	return e.run, nil
}

// Result implements Store.
func (m *Memory) Result(_ context.Context, id ID) (Run, Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.runs[id]
	switch {
	case !ok:
		return Run{}, Result{}, ErrNotFound
	case !e.run.State.Ended():
		return e.run, Result{}, ErrNotEnded
	}
	return e.run, e.result, nil
}

// Cancel implements Store.
func (m *Memory) Cancel(_ context.Context, id ID) (Run, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.runs[id]
	if !ok {
		return Run{}, false, ErrNotFound
	}
	if e.run.State.Ended() {
		return e.run, false, nil
	}
	m.end(e, Cancelled, CancelledError)
	return e.run, true, nil
}

// end ends a queued or running run in state s, taking it out of its
// function's queue.
func (m *Memory) end(e *entry, s State, why string) {
	q := m.queue(functionKey{e.run.Namespace, e.run.Function})
	if e.index >= 0 && e.run.State == Queued {
		heap.Remove(&q.due, e.index)
	}
	delete(q.running, e.run.ID)
	now := time.Now()
	e.run.State, e.run.CompletedAt = s, &now
	m.bytes -= requestSize(&e.request)
	e.request = Request{} // never sent again
	if why != "" {
		e.run.Error = invocation.TruncateError(why)
	}
	if e.run.PublishTo != "" {
		m.unpublished = append(m.unpublished, e.run.ID)
	} else {
		m.ended = append(m.ended, e.run.ID)
	}
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, namespace, function string, lease time.Duration, maxAttempts, n int) ([]Attempt, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.functions[functionKey{namespace, function}]
	if q == nil {
		return nil, nil
	}
	var out []Attempt
	for len(out) < n {
		e := m.due(q, now, maxAttempts)
		if e == nil {
			break
		}
		e.run.State, e.run.Attempts, e.leaseUntil = Running, e.run.Attempts+1, now.Add(lease)
		if e.run.StartedAt == nil {
			e.run.StartedAt = &now
		}
		q.running[e.run.ID] = e
		out = append(out, Attempt{Run: e.run, Request: e.request, Number: e.run.Attempts})
	}
	return out, nil
}

// due takes the run of q due longest out of its place, nil when none is:
// the running run whose lease ran out first, or the first queued one,
// whichever came due first. A lapsed run whose attempts are spent ends
// failed on the way. m.mu is held.
func (m *Memory) due(q *queue, now time.Time, maxAttempts int) *entry {
	e := q.lapsed(now)
	for ; e != nil && e.run.Attempts >= maxAttempts; e = q.lapsed(now) {
		m.end(e, Failed, LostError)
	}
	queued := len(q.due) > 0 && !q.due[0].notBefore.After(now)
	switch {
	case queued && (e == nil || q.due[0].notBefore.Before(e.leaseUntil)):
		return heap.Pop(&q.due).(*entry)
	case e != nil:
		return e
	}
	return nil
}

// lapsed returns the running run whose lease ran out first, if one did.
func (q *queue) lapsed(now time.Time) *entry {
	var first *entry
	for _, e := range q.running {
		if e.leaseUntil.Before(now) && (first == nil || e.leaseUntil.Before(first.leaseUntil)) {
			first = e
		}
	}
	return first
}

// Finish implements Store.
func (m *Memory) Finish(_ context.Context, a Attempt, o Outcome) (Run, error) {
	if err := o.Check(); err != nil {
		return Run{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.runs[a.Run.ID]
	switch {
	case !ok:
		return Run{}, ErrNotFound
	case e.run.State != Running || e.run.Attempts != a.Number:
		return e.run, ErrAttemptOver
	}
	if o.Result.Status > 0 {
		m.bytes += int64(len(o.Result.Body) - len(e.result.Body))
		e.run.Status, e.result = o.Result.Status, o.Result
		e.run.ResultSize, e.run.ResultTruncated = o.Result.BodySize, o.Result.Truncated
	}
	e.run.Error = invocation.TruncateError(o.Error)
	if o.Unsent {
		e.run.Attempts--
	}
	if o.State == Queued {
		q := m.queue(functionKey{e.run.Namespace, e.run.Function})
		delete(q.running, e.run.ID)
		e.run.State, e.notBefore = Queued, o.RetryAt
		heap.Push(&q.due, e)
		return e.run, nil
	}
	e.run.PublishTo = o.Publish
	m.end(e, o.State, "")
	if o.Next != nil {
		if next, err := m.add(*o.Next, time.Now()); err != nil {
			e.run.Error = invocation.TruncateError(joinError(e.run.Error, "its answer was not passed on to "+o.Next.Function+": "+err.Error()))
		} else {
			e.run.Next = next.run.ID
		}
	}
	return e.run, nil
}

// Publish implements Store.
func (m *Memory) Publish(ctx context.Context, limit int, send Sender) (int, error) {
	m.publishing.Lock()
	defer m.publishing.Unlock()
	m.mu.Lock()
	ps := make([]Publication, 0, min(limit, len(m.unpublished)))
	for _, id := range m.unpublished[:cap(ps)] {
		e := m.runs[id]
		ps = append(ps, Publication{Queue: e.run.PublishTo, Run: e.run, Result: e.result})
	}
	m.mu.Unlock()
	if len(ps) == 0 {
		return 0, nil
	}
	n, err := send(ctx, ps)
	n = max(0, min(n, len(ps)))
	now := time.Now()
	m.mu.Lock()
	for _, id := range m.unpublished[:n] {
		m.runs[id].run.PublishedAt = &now
	}
	m.ended = append(m.ended, m.unpublished[:n]...)
	m.unpublished = m.unpublished[n:]
	m.mu.Unlock()
	return n, err
}

// Over implements Store.
func (m *Memory) Over(_ context.Context, attempts []Attempt) ([]Attempt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var over []Attempt
	for _, a := range attempts {
		if e, ok := m.runs[a.Run.ID]; !ok || e.run.State != Running || e.run.Attempts != a.Number {
			over = append(over, a)
		}
	}
	return over, nil
}

// Expire implements Store; it also forgets the runs ended before the
// retention and the idempotency keys past their window.
func (m *Memory) Expire(context.Context) ([]Count, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Count
	for k, q := range m.functions {
		old := q.expired(now)
		for _, e := range old {
			m.end(e, Expired, ExpiredError)
		}
		if len(old) > 0 {
			out = append(out, Count{Namespace: k.namespace, Function: k.name, Runs: len(old)})
		}
	}
	m.forget(now)
	return out, nil
}

// expired lists the queued runs past their expiry.
func (q *queue) expired(now time.Time) []*entry {
	var old []*entry
	for _, e := range q.due {
		if e.expiresAt.Before(now) {
			old = append(old, e)
		}
	}
	return old
}

// forget drops the runs ended before the retention, and the keys past
// their window.
func (m *Memory) forget(now time.Time) {
	cutoff := now.Add(-cmp.Or(m.Retention, DefaultRetention))
	for len(m.ended) > 0 {
		e, ok := m.runs[m.ended[0]]
		if ok && e.run.CompletedAt.After(cutoff) {
			break
		}
		m.drop(m.ended[0])
		m.ended = m.ended[1:]
	}
	m.forgetKeys(now)
}

// forgetKeys drops the idempotency keys past their window.
func (m *Memory) forgetKeys(now time.Time) {
	window := cmp.Or(m.KeyWindow, DefaultKeyWindow)
	for k, use := range m.keys {
		if now.Sub(use.at) >= window {
			delete(m.keys, k)
		}
	}
}

// Pending implements Store.
func (m *Memory) Pending(context.Context) ([]Demand, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Demand
	for k, q := range m.functions {
		if len(q.due) == 0 && len(q.running) == 0 {
			delete(m.functions, k)
			continue
		}
		d := Demand{Namespace: k.namespace, Function: k.name, Queued: len(q.due), Running: len(q.running)}
		for _, e := range q.due {
			if !e.notBefore.After(now) {
				d.Due++
			}
			if d.OldestQueued.IsZero() || e.run.CreatedAt.Before(d.OldestQueued) {
				d.OldestQueued = e.run.CreatedAt
			}
		}
		for _, e := range q.running {
			if e.leaseUntil.Before(now) {
				d.Due++
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// dueHeap orders queued runs by their next attempt, then by submission.
type dueHeap []*entry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if c := h[i].notBefore.Compare(h[j].notBefore); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}

// List implements Store. It looks at every run the store holds (at most
// MaxRuns, for a listing now and then, never on a request's path).
func (m *Memory) List(_ context.Context, namespace, function string, q Query) ([]Run, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	var out []Run
	for _, e := range m.runs {
		r := &e.run
		if r.Namespace == namespace && r.Function == function && (q.State == "" || r.State == q.State) &&
			(q.Before.IsZero() || r.CreatedAt.Before(q.Before) || q.BeforeID != "" && r.CreatedAt.Equal(q.Before) && r.ID < q.BeforeID) {
			out = append(out, *r)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Run) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID)) })
	return out[:min(len(out), q.LimitOrDefault())], nil
}
