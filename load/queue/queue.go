// Package queue is `sless load --queue`: it publishes a batch of messages
// to a RabbitMQ queue and watches the function drain it, sampling the
// queue's depth each second, to report how long the drain took and at
// what rate.
package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Options describe one run.
type Options struct {
	// URL is the broker; Queue the queue, which must exist (its
	// function's trigger declares it).
	URL, Queue string
	Messages   int
	Body       []byte
	// Declare declares the queue, durable, when it is missing.
	Declare bool
	// Processed, when set, counts the messages the function has handled
	// since the run began (the platform's records of it); without it a
	// drain is the queue's ready count at zero, which misses messages
	// delivered and not yet acknowledged.
	Processed func(ctx context.Context) (int64, error)
	// MaxWait bounds the wait for the drain after the last publish.
	MaxWait time.Duration
	// Progress, when set, is called each second.
	Progress func(Progress)
}

// Progress is a drain so far.
type Progress struct {
	Elapsed   time.Duration
	Ready     int
	Processed int64 // -1 when not known
}

// Result is what a run measured.
type Result struct {
	Queue    string `json:"queue"`
	Messages int    `json:"messages"`
	// Published is how long publishing took, until the broker confirmed
	// the last message; Drained, from the first publish until the last
	// message was handled. Rate is Messages over Drained.
	Published time.Duration `json:"publishedNs"`
	Drained   time.Duration `json:"drainedNs"`
	Rate      float64       `json:"messagesPerSecond"`
	// ByProcessed says the drain was counted by the messages handled,
	// not by the queue's ready count.
	ByProcessed bool `json:"byProcessed"`
	// Depth is the queue's ready count each second.
	Depth []Depth `json:"depth"`
}

// Depth is the queue's ready count at one time of the run.
type Depth struct {
	At    time.Duration `json:"atNs"`
	Ready int           `json:"ready"`
}

// maxDepths bounds the depth samples a run keeps: a day's.
const maxDepths = 24 * 60 * 60

// ErrNotDrained is the error of a queue still not drained after MaxWait.
var ErrNotDrained = errors.New("not drained")

// Run publishes the messages and waits for the drain.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Messages < 1 {
		return Result{}, errors.New("messages must be at least 1")
	}
	conn, err := amqp.Dial(o.URL)
	if err != nil {
		return Result{}, fmt.Errorf("broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return Result{}, fmt.Errorf("broker: %w", err)
	}
	if o.Declare {
		if _, err := ch.QueueDeclare(o.Queue, true, false, false, false, nil); err != nil {
			return Result{}, fmt.Errorf("declare queue %q: %w", o.Queue, err)
		}
	} else if _, err := ch.QueueDeclarePassive(o.Queue, true, false, false, false, nil); err != nil {
		return Result{}, fmt.Errorf("queue %q: %w (declare it, or pass --declare-queue)", o.Queue, err)
	}
	probe, err := conn.Channel() // a failed read closes its channel: reads get their own
	if err != nil {
		return Result{}, fmt.Errorf("broker: %w", err)
	}
	r := Result{Queue: o.Queue, Messages: o.Messages, ByProcessed: o.Processed != nil}
	start := time.Now()
	if err := publish(ctx, ch, o); err != nil {
		return r, err
	}
	r.Published = time.Since(start)
	err = r.watch(ctx, probe, o, start)
	return r, err
}

// maxUnconfirmed bounds the messages published and not yet confirmed.
const maxUnconfirmed = 1000

func publish(ctx context.Context, ch *amqp.Channel, o Options) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("broker: confirms: %w", err)
	}
	pending := make([]*amqp.DeferredConfirmation, 0, maxUnconfirmed)
	wait := func() error {
		for _, dc := range pending {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := range o.Messages {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", o.Queue, true, false, amqp.Publishing{
			MessageId: strconv.Itoa(i), DeliveryMode: amqp.Persistent, Body: o.Body})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		if pending = append(pending, dc); len(pending) == maxUnconfirmed {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// watch samples the queue until the messages are handled.
func (r *Result) watch(ctx context.Context, ch *amqp.Channel, o Options, start time.Time) error {
	deadline := time.Now().Add(o.MaxWait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastSample := time.Duration(-time.Second)
	for {
		q, err := ch.QueueDeclarePassive(o.Queue, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("queue %q: %w", o.Queue, err)
		}
		processed := int64(-1)
		if o.Processed != nil {
			if processed, err = o.Processed(ctx); err != nil {
				return fmt.Errorf("messages handled: %w", err)
			}
		}
		elapsed := time.Since(start)
		if elapsed-lastSample >= time.Second {
			lastSample = elapsed
			if len(r.Depth) < maxDepths {
				r.Depth = append(r.Depth, Depth{At: elapsed, Ready: q.Messages})
			}
			if o.Progress != nil {
				o.Progress(Progress{Elapsed: elapsed, Ready: q.Messages, Processed: processed})
			}
		}
		if processed >= int64(o.Messages) || (o.Processed == nil && q.Messages == 0) {
			r.Drained = elapsed
			r.Rate = float64(o.Messages) / elapsed.Seconds()
			r.Depth = append(r.Depth, Depth{At: elapsed, Ready: q.Messages})
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %q: %w after %v: %d ready, %d handled", o.Queue, ErrNotDrained, o.MaxWait, q.Messages, processed)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
