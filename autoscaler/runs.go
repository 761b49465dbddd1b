package autoscaler

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/runs"
)

// RunsReader reads every function's runs not ended: runs.Store's Pending.
type RunsReader interface {
	Pending(ctx context.Context) ([]runs.Demand, error)
}

// WithRuns makes each function's runs a source of demand: the runs due
// and running, up to its async.concurrency, ask for as many instances as
// that many requests in flight would, at the function's target. A
// function at zero with runs due starts, as the dispatcher's first attempt
// would start it. A read that fails keeps what the last one asked for.
func WithRuns(r RunsReader, log *slog.Logger) Option {
	return WithSource(&runsSource{reader: r, log: log})
}

// runsReadTimeout bounds a read of the runs.
const runsReadTimeout = time.Second

// runsSource reads every function's runs at most once a second, for all
// the functions' signals: one query of the store, not one a function. The
// read is made outside the lock, by one signal while the others take the
// last read's.
type runsSource struct {
	reader RunsReader
	log    *slog.Logger

	mu      sync.Mutex
	readAt  time.Time
	reading bool // a signal is reading
	pending map[types.NamespacedName]runs.Demand
	failing bool // the last read failed: logged once, not every second
}

func (s *runsSource) Signal(namespace, name string, _ func()) Signal {
	return &runsSignal{src: s, key: key(namespace, name)}
}

// demand is fn's runs as of a read at most a second before now, or as the
// read under way finds them. A read that fails keeps the last one's.
func (s *runsSource) demand(ctx context.Context, now time.Time, fn types.NamespacedName) runs.Demand {
	if !s.takeRead(now) {
		return s.last(fn)
	}
	ctx, cancel := context.WithTimeout(ctx, runsReadTimeout)
	defer cancel()
	ds, err := s.reader.Pending(ctx)
	s.keep(now, ds, err)
	return s.last(fn)
}

// takeRead says whether the caller is to read: the last read is a second
// old and no other is under way.
func (s *runsSource) takeRead(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reading || now.Sub(s.readAt) < time.Second {
		return false
	}
	s.reading = true
	return true
}

// keep records a read.
func (s *runsSource) keep(now time.Time, ds []runs.Demand, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && !s.failing:
		s.log.Warn("runs: cannot read the runs pending: they ask for what they did", "err", err)
	case err == nil && s.failing:
		s.log.Info("runs: the runs pending read again")
	}
	if s.failing = err != nil; err == nil {
		s.pending = make(map[types.NamespacedName]runs.Demand, len(ds))
		for _, d := range ds {
			s.pending[key(d.Namespace, d.Function)] = d
		}
	}
	s.readAt, s.reading = now, false
}

// last is fn's runs as last read.
func (s *runsSource) last(fn types.NamespacedName) runs.Demand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[fn]
}

// runsSignal is the demand of a function's runs.
type runsSignal struct {
	src     *runsSource
	key     types.NamespacedName
	desired atomic.Int32
}

func (r *runsSignal) Observe(ctx context.Context, now time.Time, fn *Target) bool {
	d := r.src.demand(ctx, now, r.key)
	inFlight := int64(min(d.Due+d.Running, max(fn.RunConcurrency, 1)))
	r.desired.Store(kpa.QueueDesired(inFlight, int64(math.Ceil(fn.Spec.Target)), 0))
	return inFlight > 0
}

func (r *runsSignal) Desired() int32 { return r.desired.Load() }
