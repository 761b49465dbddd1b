package queuedepth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/apimachinery/pkg/types"
)

// WaitMessage blocks until one of queues has a message for a consumer, ctx
// ends, or the connection fails. It consumes each queue with a prefetch of
// one and closes its channel on the first delivery, which returns that
// message to its queue unacknowledged, in its place: it is the next one
// delivered, marked redelivered. Reading depths once a second finds a
// first message up to a second late; this finds it as it arrives.
func (r *Reader) WaitMessage(ctx context.Context, queues []string) error {
	if r.bad != nil {
		return r.bad
	}
	conn, err := r.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel to %s: %w", r.broker, err)
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(1, 0, false); err != nil {
		return fmt.Errorf("set prefetch on %s: %w", r.broker, err)
	}
	got := make(chan struct{}, 1)
	for i, q := range queues {
		ds, err := ch.Consume(q, fmt.Sprintf("sless-wake-%d", i), false, false, false, false, nil)
		if err != nil {
			if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.NotFound {
				return fmt.Errorf("queue %q not found on %s: %w", q, r.broker, err)
			}
			return fmt.Errorf("consume queue %q on %s: %w", q, r.broker, err)
		}
		go func() {
			for range ds { // until the channel closes
				select {
				case got <- struct{}{}:
				default:
				}
			}
		}()
	}
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case err := <-closed:
		return fmt.Errorf("wait for a message on %s: channel closed: %w", r.broker, err)
	}
}

// Waker keeps a parked consumer on the queues of each function at zero,
// and wakes the function on the first message: it starts at once rather
// than at the next depth read, or KEDA's next poll.
type Waker struct {
	b   *Brokers
	log *slog.Logger

	mu     sync.Mutex
	parked map[types.NamespacedName]context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// NewWaker returns a waker on b's brokers.
func NewWaker(b *Brokers, log *slog.Logger) *Waker {
	return &Waker{b: b, log: log, parked: map[types.NamespacedName]context.CancelFunc{}}
}

// Park waits, until Unpark, for a message on one of queues (by broker),
// and then calls wake once. A function already parked stays parked as it
// was.
func (w *Waker) Park(fn types.NamespacedName, queues map[string][]string, wake func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.parked[fn] != nil || len(queues) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.parked[fn] = cancel
	var once sync.Once
	for broker, qs := range queues {
		w.wg.Go(func() {
			if !w.wait(ctx, fn, broker, qs) {
				return
			}
			once.Do(func() {
				w.mu.Lock()
				if ctx.Err() == nil { // still this park's: done with it
					delete(w.parked, fn)
				}
				w.mu.Unlock()
				cancel() // the other brokers' consumers
				wake()
			})
		})
	}
}

// wait retries WaitMessage with backoff until a message comes (true) or
// ctx ends.
func (w *Waker) wait(ctx context.Context, fn types.NamespacedName, broker string, queues []string) bool {
	backoff := minBackoff
	for {
		err := w.b.WaitMessage(ctx, broker, queues)
		switch {
		case ctx.Err() != nil:
			return false
		case err == nil:
			return true
		}
		w.log.Warn("queue wake-up: cannot watch the queues; depth reads still wake the function", "function", fn.String(), "err", err, "retryIn", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Unpark stops watching fn's queues.
func (w *Waker) Unpark(fn types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cancel := w.parked[fn]; cancel != nil {
		cancel()
		delete(w.parked, fn)
	}
}

// Close unparks every function and waits for their consumers to end.
func (w *Waker) Close() {
	w.mu.Lock()
	w.closed = true
	for key, cancel := range w.parked {
		cancel()
		delete(w.parked, key)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
