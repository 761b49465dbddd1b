// Package scheduler fires functions' cron triggers. preWarm before each
// fire it raises the function's floor to one instance, so that the fire
// finds it warm; it sends the fire through the activator, as any
// invocation; and it lowers the floor once the fire is answered.
//
// Fires are claimed in a Ledger before they are sent, so that a fire
// happens once however many schedulers run and as functions change hands,
// and fires missed while no scheduler ran are not replayed in a burst:
// one catch-up fire at most, logged.
package scheduler

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
)

// Trigger is one cron trigger of a function.
type Trigger struct {
	Namespace, Function, Name string
	Schedule                  cron.Schedule
	Location                  *time.Location
	// PreWarm is how long before each fire the floor rises; 0 never.
	// With AutoPreWarm it follows the function's measured start-up.
	PreWarm     time.Duration
	AutoPreWarm bool
	Body        string
	// Timeout bounds the fire: the function's timeoutSeconds.
	Timeout time.Duration
}

// ledgerKey names t in the Ledger: namespace/function/trigger, the form
// the ledgers keep (FileLedger's JSON, kubeledger's ConfigMap).
func (t *Trigger) ledgerKey() string { return t.Namespace + "/" + t.Function + "/" + t.Name }

// Fire is one invocation of a cron trigger.
type Fire struct {
	Trigger   *Trigger
	Scheduled time.Time
	// CatchUp marks the one fire sent for fires missed.
	CatchUp bool
}

// Firer sends a fire through the activator and returns the status it was
// answered with.
type Firer interface {
	Fire(ctx context.Context, f Fire) (status int, err error)
}

// Floors raises and lowers a function's least instances, deciding at once
// when it rises.
type Floors interface {
	SetFloor(namespace, name string, floor int32)
	// StartupTime is how long the function last took from zero to a
	// ready instance; ok is false before it first did.
	StartupTime(namespace, name string) (d time.Duration, ok bool)
}

// An automatic pre-warm is the measured start-up plus half of it, at least
// MinPreWarmMargin, and at most MaxPreWarm; v1alpha1.DefaultPreWarm
// before any start was measured.
const (
	MinPreWarmMargin = time.Second
	MaxPreWarm       = time.Hour
)

// Ledger remembers the last fire of each trigger, shared by the schedulers
// that may run: Claim records scheduled as fired and reports whether this
// caller is the one to send it, and last the previous fire known.
type Ledger interface {
	Claim(ctx context.Context, key string, scheduled time.Time) (ok bool, err error)
	Last(ctx context.Context, key string) (time.Time, error)
}

// Scheduler fires the cron triggers it is given.
type Scheduler struct {
	firer   Firer
	floors  Floors
	ledger  Ledger
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	triggers map[types.NamespacedName][]*entry // by function
	queue    events
	warming  map[types.NamespacedName]int // by function: triggers warming it now
	wake     chan struct{}
	inflight sync.WaitGroup
}

// entry is a trigger and its next fire.
type entry struct {
	t    *Trigger
	key  string    // the ledger's key (Trigger.ledgerKey)
	next time.Time // its next fire
	at   time.Time // its next event: the warm-up before next, or next
	warm bool      // its floor is raised for next
	idx  int       // in the queue; -1 when not queued
	// catchUp marks next as the one fire for those missed.
	catchUp bool
}

// plan sets the entry's next event for its next fire: its warm-up, when
// it has one and is not warm yet, else the fire.
func (s *Scheduler) plan(e *entry) {
	e.at = e.next
	if w := s.preWarm(e.t); w > 0 && !e.warm {
		e.at = e.next.Add(-w)
	}
}

// preWarm is how long before a fire of t its function is warmed.
func (s *Scheduler) preWarm(t *Trigger) time.Duration {
	if !t.AutoPreWarm {
		return t.PreWarm
	}
	d, ok := s.floors.StartupTime(t.Namespace, t.Function)
	if !ok {
		return v1alpha1.DefaultPreWarm
	}
	return min(d+max(d/2, MinPreWarmMargin), MaxPreWarm)
}

// New returns a scheduler with no triggers.
func New(firer Firer, floors Floors, ledger Ledger, m *Metrics, log *slog.Logger) *Scheduler {
	return &Scheduler{firer: firer, floors: floors, ledger: ledger, log: log, metrics: m.m,
		triggers: map[types.NamespacedName][]*entry{}, warming: map[types.NamespacedName]int{}, wake: make(chan struct{}, 1)}
}

// Set replaces a function's cron triggers (none: it has none).
func (s *Scheduler) Set(ctx context.Context, namespace, function string, triggers []Trigger) {
	now := time.Now()
	fresh := make([]*entry, 0, len(triggers))
	for i := range triggers {
		t := triggers[i]
		e := &entry{t: &t, key: t.ledgerKey(), idx: -1}
		e.next, e.catchUp = s.firstFire(ctx, e, now)
		s.plan(e)
		fresh = append(fresh, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fn := types.NamespacedName{Namespace: namespace, Name: function}
	s.removeLocked(fn)
	if len(fresh) > 0 {
		s.triggers[fn] = fresh
	}
	for _, e := range fresh {
		heap.Push(&s.queue, e)
	}
	s.poke()
}

// firstFire is a new trigger's first fire: now, as a catch-up, when the
// ledger knows of a fire since which one was missed; otherwise the next
// in its schedule.
func (s *Scheduler) firstFire(ctx context.Context, e *entry, now time.Time) (time.Time, bool) {
	next := e.t.Schedule.Next(now.In(e.t.Location))
	last, err := s.ledger.Last(ctx, e.key)
	if err != nil {
		s.log.Warn("cron: the last fire is unknown, no catch-up", "trigger", e.key, "err", err)
		return next, false
	}
	if !last.IsZero() {
		if missed := e.t.Schedule.Next(last.In(e.t.Location)); missed.Before(now) {
			return missed, true
		}
	}
	return next, false
}

// Remove forgets a function's triggers; a fire being sent finishes.
func (s *Scheduler) Remove(namespace, function string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(types.NamespacedName{Namespace: namespace, Name: function})
}

func (s *Scheduler) removeLocked(fn types.NamespacedName) {
	for _, e := range s.triggers[fn] {
		if e.idx >= 0 {
			heap.Remove(&s.queue, e.idx)
		}
		if e.warm {
			s.coolLocked(e)
		}
	}
	delete(s.triggers, fn)
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run fires the triggers until ctx ends; then it warms and fires no more,
// lowers the floors it raised for fires not sent, and waits for the fires
// being sent. A platform that drains ends ctx as the drain begins, so that
// no fire, and no warm-up, starts an instance it is stopping.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		wait := s.step(ctx, now)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			s.coolAll()
			s.inflight.Wait()
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// coolAll lowers the floors raised for fires not sent yet.
func (s *Scheduler) coolAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, es := range s.triggers {
		for _, e := range es {
			if e.warm {
				s.coolLocked(e)
			}
		}
	}
}

// step warms and fires what is due at now, and returns how long until the
// next event.
func (s *Scheduler) step(ctx context.Context, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.queue.Len() > 0 {
		e := s.queue[0]
		if now.Before(e.at) {
			return e.at.Sub(now)
		}
		if e.at.Before(e.next) { // its warm-up
			s.warmLocked(e)
			s.plan(e)
			heap.Fix(&s.queue, 0)
			continue
		}
		heap.Pop(&s.queue)
		s.fireLocked(ctx, e, now)
	}
	return time.Hour
}

// fireLocked sends e's due fire in the background and queues its next.
func (s *Scheduler) fireLocked(ctx context.Context, e *entry, now time.Time) {
	f := Fire{Trigger: e.t, Scheduled: e.next, CatchUp: e.catchUp}
	warm := e.warm
	e.warm = false // the fire owns the raised floor now
	e.catchUp = false
	e.next = e.t.Schedule.Next(now.In(e.t.Location))
	s.plan(e)
	heap.Push(&s.queue, e)
	s.inflight.Go(func() {
		s.send(ctx, f, now)
		if warm {
			s.mu.Lock()
			s.coolFunctionLocked(e.t.Namespace, e.t.Function)
			s.mu.Unlock()
		}
	})
}

// send claims and sends one fire.
func (s *Scheduler) send(ctx context.Context, f Fire, now time.Time) {
	t := f.Trigger
	key := t.ledgerKey()
	ok, err := s.ledger.Claim(ctx, key, f.Scheduled)
	switch {
	case err != nil:
		s.log.Warn("cron: fire not sent: it could not be claimed", "trigger", key, "scheduled", f.Scheduled, "err", err)
		s.metrics.fire(t, "unclaimed")
		return
	case !ok:
		s.metrics.fire(t, "duplicate") // another scheduler sent it
		return
	}
	if f.CatchUp {
		s.log.Info("cron: one catch-up fire for fires missed", "trigger", key, "scheduled", f.Scheduled)
	}
	s.metrics.lag.WithLabelValues(t.Namespace, t.Function, t.Name).Observe(now.Sub(f.Scheduled).Seconds())
	fctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	status, err := s.firer.Fire(fctx, f)
	switch {
	case err != nil:
		s.log.Warn("cron: fire failed", "trigger", key, "scheduled", f.Scheduled, "err", err)
		s.metrics.fire(t, "error")
	case status >= 500:
		s.metrics.fire(t, "failed")
	default:
		s.metrics.fire(t, "ok")
	}
}

// warmLocked raises e's function's floor.
func (s *Scheduler) warmLocked(e *entry) {
	e.warm = true
	fn := types.NamespacedName{Namespace: e.t.Namespace, Name: e.t.Function}
	if s.warming[fn]++; s.warming[fn] == 1 {
		s.floors.SetFloor(e.t.Namespace, e.t.Function, 1)
	}
}

func (s *Scheduler) coolLocked(e *entry) {
	e.warm = false
	s.coolFunctionLocked(e.t.Namespace, e.t.Function)
}

// coolFunctionLocked ends one warm-up of a function, and lowers its floor
// after the last.
func (s *Scheduler) coolFunctionLocked(namespace, function string) {
	fn := types.NamespacedName{Namespace: namespace, Name: function}
	if s.warming[fn]--; s.warming[fn] <= 0 {
		delete(s.warming, fn)
		s.floors.SetFloor(namespace, function, 0)
	}
}

// events orders entries by their next event.
type events []*entry

func (q events) Len() int           { return len(q) }
func (q events) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q events) Swap(i, j int)      { q[i], q[j] = q[j], q[i]; q[i].idx, q[j].idx = i, j }
func (q *events) Push(x any)        { e := x.(*entry); e.idx = len(*q); *q = append(*q, e) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.idx = -1
	return e
}
