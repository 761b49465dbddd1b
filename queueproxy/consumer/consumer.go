// Package consumer consumes a function's RabbitMQ queues in the
// queue-proxy of each of its instances, so that consumption scales with
// instances. Each message is one invocation of the user process, and is
// acknowledged only once its outcome is durable: the function answered
// 2xx, or the message is safe in a retry or dead-letter queue (publisher
// confirms). Delivery is at least once: a message whose outcome was not
// acknowledged (a broker restart, an instance killed) is delivered again.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqpurl"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

const (
	// dialTimeout bounds a dial, its TCP and AMQP handshakes.
	dialTimeout = 5 * time.Second
	// heartbeat finds a broker gone without a word.
	heartbeat = 10 * time.Second
	// The wait before the next connection attempt doubles with each failed
	// one, from minReconnect up to maxReconnect.
	minReconnect = 100 * time.Millisecond
	maxReconnect = 30 * time.Second
	// confirmTimeout bounds the wait for the broker to confirm a publish.
	confirmTimeout = 10 * time.Second
	// DefaultBackoff is the wait before a failed message's first retry;
	// it doubles with each retry, up to MaxBackoff.
	DefaultBackoff = time.Second
	MaxBackoff     = time.Minute
)

// Invoker invokes the user process with a message's request, through the
// instance's breaker and timeout (the queue-proxy).
type Invoker interface {
	Invoke(req *fasthttp.Request, resp *fasthttp.Response, gone <-chan struct{}) Answer
	// Ready is closed once the user process answers its health check.
	Ready() <-chan struct{}
}

// Answer is how an invocation ended.
type Answer struct {
	// Code is the status: the function's, or the platform's when it
	// failed the invocation (502, 503, 504).
	Code int
	// Reason says why a failure failed: the start of the function's
	// answer, or the platform's cause.
	Reason string
	// Platform is set when the platform, not the function, answered.
	Platform bool
	// Unsent means the request never reached the user process: it
	// refused the connection (it is down), or no slot freed in time.
	Unsent bool
}

// crashed reports whether the connection to the user process broke
// after the request was sent, before its answer: the process died (or
// closed the connection) while it handled the message.
func (a Answer) crashed() bool {
	return a.Platform && !a.Unsent && a.Code == fasthttp.StatusBadGateway
}

// Options configure a Consumer.
type Options struct {
	Namespace, Function string
	Trigger             wire.RabbitMQTrigger
	// URL is the broker's AMQP URL.
	URL string
	// Prefetch is the most unacknowledged messages held: the trigger's,
	// capped by the function's concurrency.
	Prefetch int
	// Backoff is the first retry's wait (DefaultBackoff when 0).
	Backoff time.Duration
	// Instance names the instance in records.
	Instance string
	// Isolation is shared by the consumers of one instance, which invoke
	// the same process (nil: one of its own).
	Isolation *Isolation
	Records   invocation.Sink // nil: no records
	Metrics   *Metrics
	Log       *slog.Logger
}

// Consumer consumes one trigger's queue, reconnecting with backoff for as
// long as it runs.
type Consumer struct {
	opts   Options
	broker string // the URL without its password
	invoke Invoker
	iso    *Isolation
	log    *slog.Logger
	m      queueMetrics

	mu     sync.Mutex
	status Status
	// warnedType is set once a quorum trigger's queue was found not to
	// be one.
	warnedType atomic.Bool
}

// Status is what a consumer is doing, for the platform's status.
type Status struct {
	Trigger string `json:"trigger"`
	Queue   string `json:"queue"`
	// State is connecting, consuming, failing or stopped.
	State string `json:"state"`
	// Error is why it is failing: a bad URL, refused credentials, a
	// missing queue, a broker that cannot be reached.
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since"`
}

// States of a consumer.
const (
	StateConnecting = "connecting"
	StateConsuming  = "consuming"
	StateFailing    = "failing"
	StateStopped    = "stopped"
)

// New returns a consumer of opts.Trigger's queue that invokes through inv.
func New(opts Options, inv Invoker) *Consumer {
	if opts.Backoff == 0 {
		opts.Backoff = DefaultBackoff
	}
	opts.Prefetch = max(opts.Prefetch, 1)
	if opts.Isolation == nil {
		opts.Isolation = NewIsolation()
	}
	c := &Consumer{opts: opts, broker: amqpurl.Redact(opts.URL), invoke: inv, iso: opts.Isolation,
		log: opts.Log.With("trigger", opts.Trigger.Name, "queue", opts.Trigger.Queue),
		m:   opts.Metrics.forQueue(opts.Trigger.Queue)}
	c.setStatus(StateConnecting, nil)
	return c
}

// Status reports what the consumer is doing.
func (c *Consumer) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

func (c *Consumer) setStatus(state string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if c.status.State != state || c.status.Error != msg {
		c.status = Status{Trigger: c.opts.Trigger.Name, Queue: c.opts.Trigger.Queue, State: state, Error: msg, Since: time.Now()}
	}
}

// Run consumes until ctx is cancelled, reconnecting with backoff when the
// connection fails. When ctx is cancelled it drains: the consumer is
// cancelled first, so that no new message arrives, deliveries not yet
// started return to the queue, and Run returns once those in flight have
// ended.
func (c *Consumer) Run(ctx context.Context) {
	wait := minReconnect
	for {
		consumed, err := c.session(ctx)
		if ctx.Err() != nil {
			c.setStatus(StateStopped, nil)
			return
		}
		if consumed {
			wait = minReconnect
		}
		c.setStatus(StateFailing, err)
		c.log.Warn("rabbitmq consumer failing", "err", err, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			c.setStatus(StateStopped, nil)
			return
		case <-t.C:
		}
		wait = min(2*wait, maxReconnect)
	}
}

// session consumes over one connection until it fails or ctx is
// cancelled. consumed reports whether it got as far as consuming, which
// resets the reconnection backoff.
func (c *Consumer) session(ctx context.Context) (consumed bool, err error) {
	conn, err := amqp.DialConfig(c.opts.URL, amqp.Config{
		Dial:       amqp.DefaultDial(dialTimeout),
		Heartbeat:  heartbeat,
		Properties: amqp.Table{"connection_name": fmt.Sprintf("sless %s/%s %s", c.opts.Namespace, c.opts.Function, c.opts.Trigger.Name)},
	})
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", c.broker, dialError(err))
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	if err := checkQueue(conn, c.opts.Trigger.Queue); err != nil {
		return false, err
	}
	pub, err := newPublisher(conn, c.opts.Trigger.Queue, c.opts.Trigger.QueueType == v1alpha1.QueueQuorum)
	if err != nil {
		return false, err
	}
	if dlq := c.opts.Trigger.DeadLetterQueue; dlq != "" {
		if err := pub.declareDeadLetter(dlq); err != nil {
			return false, err
		}
	}
	sub, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if err := sub.Qos(c.opts.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	const tag = "sless"
	deliveries, err := sub.Consume(c.opts.Trigger.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %q: %w", c.opts.Trigger.Queue, err)
	}
	c.setStatus(StateConsuming, nil)
	c.log.Info("rabbitmq consumer consuming", "broker", c.broker, "prefetch", c.opts.Prefetch)

	// The broker sends at most Prefetch unacknowledged messages, so at
	// most that many handlers run. They end, then the acker settles what
	// they left, then the connection closes.
	ack := newAcker(sub, c.opts.Prefetch, c.log)
	defer ack.close()
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return true, closeReason(closed, c.opts.Trigger.Queue)
			}
			handlers.Go(func() { c.handle(ctx, pub, ack, d) })
		case <-ctx.Done():
			if err := sub.Cancel(tag, false); err != nil {
				return true, nil // the connection is gone: what it held returns to the queue
			}
			for d := range deliveries {
				// Sent before the cancel and not started: back to the
				// queue, in place.
				ack.Requeue(d.DeliveryTag)
				c.m.requeued.Inc()
			}
			return true, nil
		}
	}
}

// closeReason says why the deliveries stopped: the connection's or the
// channel's closing, or the broker cancelling the consumer (the queue was
// deleted).
func closeReason(closed <-chan *amqp.Error, queue string) error {
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("connection closed: %w", err)
		}
	case <-time.After(100 * time.Millisecond):
	}
	return fmt.Errorf("consumer of %q cancelled by the broker (queue deleted?)", queue)
}

// checkQueue makes sure the queue exists, on a channel of its own: a
// failed passive declare closes its channel.
func checkQueue(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.NotFound {
			return fmt.Errorf("queue %q not found", queue)
		}
		return fmt.Errorf("check queue %q: %w", queue, err)
	}
	return nil
}

// dialError makes a refused login say so plainly.
func dialError(err error) error {
	if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.AccessRefused {
		return fmt.Errorf("credentials refused: %w", err)
	}
	return err
}
