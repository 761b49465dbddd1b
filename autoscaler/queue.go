package autoscaler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/autoscaler/kpa"
)

// Queue is a queue a function consumes, with KEDA's QueueLength settings:
// it asks for ⌈ready messages / Target⌉ instances once it holds more than
// Activation messages (see kpa.QueueDesired).
type Queue struct {
	// Broker names the queue's broker for the QueueReader: on Kubernetes
	// the namespace/name of the trigger's connectionSecret; empty in
	// sless dev, which has one.
	Broker string
	// Name is the queue's name on its broker.
	Name string
	// Target is targetQueueLength, Activation activationQueueLength.
	Target, Activation int64
}

// QueueReader reads how many messages in a queue are ready for delivery.
type QueueReader interface {
	Depth(ctx context.Context, broker, queue string) (int64, error)
}

// Waker parks a consumer on the queues of a function with no ready
// instance (by broker), and calls wake on the first message: the function
// starts at once, not at the next depth read or KEDA poll.
type Waker interface {
	Park(fn types.NamespacedName, queues map[string][]string, wake func())
	Unpark(fn types.NamespacedName)
}

// WithQueueReader makes the autoscaler read the depth of functions' queues
// each second with r; without one, queues ask for nothing.
func WithQueueReader(r QueueReader) Option {
	return func(o *options) { o.queues = r }
}

// WithWaker makes the autoscaler wake functions at zero on their queues'
// first message.
func WithWaker(w Waker) Option {
	return func(o *options) { o.waker = w }
}

// queueReadTimeout bounds the reads of one function's queues in a second,
// so that a broker that does not answer cannot hold up the other functions.
const queueReadTimeout = time.Second

// queueSource makes the signals of the functions' queues.
type queueSource struct {
	reader  QueueReader // nil: no depth is read
	waker   Waker       // nil: no consumer is parked
	metrics *metrics
	log     *slog.Logger
}

func (s *queueSource) Signal(namespace, name string, wake func()) Signal {
	return &queueSignal{src: s, key: key(namespace, name), wake: wake}
}

// queueSignal is the demand of a function's queues: the most any of them
// asks for, by its depth read each second. A queue whose read fails keeps
// asking for what it did before.
type queueSignal struct {
	src  *queueSource
	key  types.NamespacedName
	wake func()

	mu      sync.Mutex
	desired int32                // the most any queue asks for
	reads   map[string]queueRead // by queue name
}

// queueRead is what one queue asked for at its last good read, kept while
// reads fail.
type queueRead struct {
	desired int32
	depth   int64  // messages ready at the last good read
	failing bool   // the last read failed: logged once, not every second
	err     string // why it failed
}

func (q *queueSignal) Observe(ctx context.Context, _ time.Time, fn *Target) bool {
	if q.src.reader == nil {
		return false
	}
	depths, errs := q.src.read(ctx, fn.Queues)
	return q.update(fn, depths, errs) > 0
}

func (q *queueSignal) Desired() int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.desired
}

// read reads the depth of queues, within queueReadTimeout.
func (s *queueSource) read(ctx context.Context, queues []Queue) ([]int64, []error) {
	if len(queues) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, queueReadTimeout)
	defer cancel()
	depths := make([]int64, len(queues))
	errs := make([]error, len(queues))
	for i, q := range queues {
		depths[i], errs[i] = s.reader.Depth(ctx, q.Broker, q.Name)
	}
	return depths, errs
}

// update turns the depths read into what the queues ask for.
func (q *queueSignal) update(fn *Target, depths []int64, errs []error) int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var reads map[string]queueRead
	if len(fn.Queues) > 0 {
		reads = make(map[string]queueRead, len(fn.Queues))
	}
	q.desired = 0
	for i, c := range fn.Queues {
		read := q.reads[c.Name]
		switch {
		case errs[i] != nil && !read.failing:
			q.src.log.Warn("queue depth", "namespace", fn.Namespace, "function", fn.Name, "queue", c.Name, "err", errs[i])
		case errs[i] == nil && read.failing:
			q.src.log.Info("queue depth read again", "namespace", fn.Namespace, "function", fn.Name, "queue", c.Name)
		}
		read.failing, read.err = errs[i] != nil, ""
		if read.failing {
			read.err = errs[i].Error()
		} else {
			read.desired, read.depth = kpa.QueueDesired(depths[i], c.Target, c.Activation), depths[i]
			// Rare enough (functions with queues, once a second) to
			// look the gauge up each time.
			q.src.metrics.queueDepth.WithLabelValues(fn.Namespace, fn.Name, c.Name).Set(float64(depths[i]))
		}
		reads[c.Name] = read
		q.desired = max(q.desired, read.desired)
	}
	q.reads = reads
	return q.desired
}

// Idle parks a consumer on the queues of a function with no ready
// instance, and unparks it once one is ready (its queue-proxies consume).
func (q *queueSignal) Idle(fn *Target, idle bool) {
	w := q.src.waker
	if w == nil || len(fn.Queues) == 0 {
		return
	}
	if !idle {
		w.Unpark(q.key)
		return
	}
	byBroker := map[string][]string{}
	for _, c := range fn.Queues {
		byBroker[c.Broker] = append(byBroker[c.Broker], c.Name)
	}
	w.Park(q.key, byBroker, q.wake)
}

func (q *queueSignal) Close() {
	if q.src.waker != nil {
		q.src.waker.Unpark(q.key)
	}
}

// errors reports, by queue, why its last read failed; nil when all were
// good.
func (q *queueSignal) errors() map[string]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out map[string]string
	for name, r := range q.reads {
		if r.failing {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = r.err
		}
	}
	return out
}

// depth is the messages ready on all the queues at their last good reads.
func (q *queueSignal) depth() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	var n int64
	for _, r := range q.reads {
		n += r.depth
	}
	return n
}

// queues is the function's queue signal; nil without a queue source.
func (st *state) queues() *queueSignal {
	for _, s := range st.signals {
		if q, ok := s.(*queueSignal); ok {
			return q
		}
	}
	return nil
}

// QueueErrors reports, by queue, why the last read of a function's queue
// failed; nil when every read was good.
func (a *Autoscaler) QueueErrors(namespace, name string) map[string]string {
	if st := a.get(namespace, name); st != nil && st.queues() != nil {
		return st.queues().errors()
	}
	return nil
}

// QueueDepth reports the messages ready on all of a function's queues at
// their last good reads.
func (a *Autoscaler) QueueDepth(namespace, name string) int64 {
	if st := a.get(namespace, name); st != nil && st.queues() != nil {
		return st.queues().depth()
	}
	return 0
}
