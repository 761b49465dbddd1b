// Package queuedepth reads how many messages wait in RabbitMQ queues: the
// input of the autoscaler's queue-depth rule (KEDA's QueueLength).
package queuedepth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/internal/amqpurl"
)

const (
	// maxCalls bounds the broker calls in flight, and so the open channels
	// and the goroutines that calls given up by their callers leave behind:
	// amqp091 calls cannot be cancelled, they end when the broker answers
	// or the connection drops.
	maxCalls = 4
	// dialTimeout bounds one dial, TCP and AMQP handshakes, and Close.
	dialTimeout = 5 * time.Second
	// The wait before the next dial doubles with each failed dial, from
	// minBackoff up to maxBackoff.
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

var errClosed = errors.New("queue depth reader is closed")

// Reader reads queue depths over one kept connection, dialed on first use
// and again after it breaks, and a few channels on it. A broker that is
// down is dialed with backoff, not on every call. It is safe for
// concurrent use.
type Reader struct {
	url    string
	broker string // the URL without its password, for errors and logs
	bad    error  // why url is not an AMQP URI
	log    *slog.Logger
	calls  chan struct{} // a token per call in flight

	dial       sync.Mutex // held while dialing, so that callers wait for one dial
	minBackoff time.Duration

	mu       sync.Mutex
	conn     *amqp.Connection
	idle     []*amqp.Channel // open channels no call uses, at most maxCalls
	closed   bool
	failures int // dials failed in a row
	nextDial time.Time
	dialErr  error // the last dial's failure
}

// New returns a reader of the broker at url (amqp://user:password@host:port/vhost).
// It dials on the first Depth, so a broker that is down does not stop the
// autoscaler from starting.
func New(url string, log *slog.Logger) *Reader {
	r := &Reader{url: url, log: log, calls: make(chan struct{}, maxCalls), minBackoff: minBackoff}
	r.broker, r.bad = redact(url)
	return r
}

// redact returns url without its password, or why it is not an AMQP URI
// without quoting it.
func redact(rawURL string) (string, error) {
	if err := amqpurl.Check(rawURL); err != nil {
		return "(invalid URL)", fmt.Errorf("broker URL: %w", err)
	}
	return amqpurl.Redact(rawURL), nil
}

// Depth returns how many messages in queue are ready for delivery. It
// returns when ctx ends, leaving the broker call to finish on its own; such
// calls are bounded in number.
func (r *Reader) Depth(ctx context.Context, queue string) (int64, error) {
	if r.bad != nil {
		return 0, r.bad
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("read queue %q on %s: %w", queue, r.broker, err)
	}
	select {
	case r.calls <- struct{}{}:
	case <-ctx.Done():
		return 0, fmt.Errorf("read queue %q on %s: %w", queue, r.broker, ctx.Err())
	}
	type result struct {
		depth int64
		err   error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-r.calls }()
		depth, err := r.declare(queue)
		done <- result{depth, err}
	}()
	select {
	case res := <-done:
		return res.depth, res.err
	case <-ctx.Done():
		return 0, fmt.Errorf("read queue %q on %s: %w", queue, r.broker, ctx.Err())
	}
}

// declare declares queue passively: the broker answers with its ready
// messages, or closes the channel when there is no such queue.
func (r *Reader) declare(queue string) (int64, error) {
	ch, err := r.channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close() // already closed by the broker or with the connection
		if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.NotFound {
			return 0, fmt.Errorf("queue %q not found on %s: %w", queue, r.broker, err)
		}
		return 0, fmt.Errorf("read queue %q on %s: %w", queue, r.broker, err)
	}
	r.mu.Lock()
	if !r.closed {
		r.idle = append(r.idle, ch)
	}
	r.mu.Unlock()
	return int64(q.Messages), nil
}

// channel returns an idle open channel, or opens one.
func (r *Reader) channel() (*amqp.Channel, error) {
	r.mu.Lock()
	for len(r.idle) > 0 {
		ch := r.idle[len(r.idle)-1]
		r.idle = r.idle[:len(r.idle)-1]
		if !ch.IsClosed() {
			r.mu.Unlock()
			return ch, nil
		}
	}
	r.mu.Unlock()
	conn, err := r.connection()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a channel to %s: %w", r.broker, err)
	}
	return ch, nil
}

// connection returns the open connection, dialing when there is none and
// the backoff allows.
func (r *Reader) connection() (*amqp.Connection, error) {
	if conn, err := r.current(); conn != nil || err != nil {
		return conn, err
	}
	r.dial.Lock()
	defer r.dial.Unlock()
	if conn, err := r.current(); conn != nil || err != nil { // dialed meanwhile
		return conn, err
	}
	conn, err := amqp.DialConfig(r.url, amqp.Config{
		Dial:       amqp.DefaultDial(dialTimeout),
		Properties: amqp.Table{"product": "sless", "connection_name": connectionName()},
	})
	return r.dialed(conn, err)
}

// connectionName names the connection on the broker's side, so that an
// operator can tell whose it is.
func connectionName() string {
	return fmt.Sprintf("sless autoscaler queue depth, pid %d", os.Getpid())
}

// current returns the open connection, nil when one is to be dialed now,
// or why not.
func (r *Reader) current() (*amqp.Connection, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, errClosed
	case r.conn != nil && !r.conn.IsClosed():
		return r.conn, nil
	case r.conn != nil:
		r.log.Warn("queue depth: broker connection lost, redialing", "broker", r.broker)
		r.conn, r.idle = nil, nil
	case time.Now().Before(r.nextDial):
		return nil, fmt.Errorf("broker %s unreachable, next dial in %s: %w",
			r.broker, time.Until(r.nextDial).Round(time.Millisecond), r.dialErr)
	}
	return nil, nil
}

// dialed records a dial's outcome.
func (r *Reader) dialed(conn *amqp.Connection, err error) (*amqp.Connection, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failures++
		r.dialErr = err
		r.nextDial = time.Now().Add(min(r.minBackoff<<min(r.failures-1, 16), maxBackoff))
		if r.failures == 1 {
			r.log.Warn("queue depth: broker unreachable", "broker", r.broker, "err", err)
		}
		return nil, fmt.Errorf("dial broker %s: %w", r.broker, err)
	}
	if r.closed {
		_ = conn.CloseDeadline(time.Now().Add(dialTimeout))
		return nil, errClosed
	}
	r.log.Info("queue depth: broker connected", "broker", r.broker, "failedDials", r.failures)
	r.conn, r.failures, r.dialErr = conn, 0, nil
	return conn, nil
}

// Close closes the connection; Depth fails from then on.
func (r *Reader) Close() error {
	r.mu.Lock()
	conn := r.conn
	r.closed, r.conn, r.idle = true, nil, nil
	r.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	if err := conn.CloseDeadline(time.Now().Add(dialTimeout)); err != nil {
		return fmt.Errorf("close connection to %s: %w", r.broker, err)
	}
	return nil
}
