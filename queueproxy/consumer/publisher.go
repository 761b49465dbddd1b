package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/apis/v1alpha1"
)

// publisher publishes the messages a consumer retries and dead-letters,
// on a channel in confirm mode, one at a time: a publish is done when the
// broker has confirmed it and has not returned it unroutable. Publishing
// is the failure path only, so it is not worth pipelining.
type publisher struct {
	conn    *amqp.Connection
	queue   string // the consumed queue, where retries return
	quorum  bool   // declare quorum queues, as the consumed one
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	// declared holds the queues declared on this connection.
	declared map[string]bool
}

func newPublisher(conn *amqp.Connection, queue string, quorum bool) (*publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &publisher{conn: conn, queue: queue, quorum: quorum, ch: ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)), declared: map[string]bool{}}, nil
}

// retry puts msg in the retry queue of wait, whose messages expire after
// wait back into the consumed queue (its dead-letter route): the backoff
// holds no slot of the consumer, and survives the instance.
func (p *publisher) retry(msg amqp.Publishing, wait time.Duration) error {
	name := retryQueueName(p.queue, wait)
	args := amqp.Table{
		"x-message-ttl":             wait.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": p.queue,
	}
	if p.quorum {
		// A quorum queue dead-letters at most once unless told; at
		// least once needs publishes refused, not heads dropped, when
		// the queue is full.
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return p.publish(name, p.typed(args), msg)
}

// sendBack puts msg back in the consumed queue, at its tail.
func (p *publisher) sendBack(msg amqp.Publishing) error {
	return p.publish(p.queue, nil, msg)
}

// deadLetter puts msg in the dead-letter queue, declared when missing.
func (p *publisher) deadLetter(msg amqp.Publishing, dlq string) error {
	return p.publish(dlq, p.typed(nil), msg)
}

// declareDeadLetter declares the dead-letter queue when missing, before it
// is needed: the consumed queue's own dead-letter route (a quorum queue's
// delivery limit) may lead there, and the broker drops what it
// dead-letters to no queue.
func (p *publisher) declareDeadLetter(dlq string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := declare(p.conn, dlq, p.typed(nil)); err != nil {
		return err
	}
	p.declared[dlq] = true
	return nil
}

// typed adds the queue type to a new queue's arguments.
func (p *publisher) typed(args amqp.Table) amqp.Table {
	if !p.quorum {
		return args
	}
	if args == nil {
		args = amqp.Table{}
	}
	args["x-queue-type"] = string(v1alpha1.QueueQuorum)
	return args
}

// publish sends msg to queue, declaring it first with args when this
// connection has not yet; the consumed queue is the user's and never
// declared: a message sent back to it is returned if it is gone.
func (p *publisher) publish(queue string, args amqp.Table, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if queue != p.queue && !p.declared[queue] {
		if err := declare(p.conn, queue, args); err != nil {
			return err
		}
		p.declared[queue] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %q: %w", queue, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm of publish to %q: %w", queue, err)
	}
	if !ok {
		return fmt.Errorf("publish to %q: refused by the broker", queue)
	}
	// A return comes before its confirm: one now is this message's.
	select {
	case r := <-p.returns:
		delete(p.declared, queue)
		return fmt.Errorf("publish to %q: returned: %s", queue, r.ReplyText)
	default:
	}
	return nil
}

// declare makes sure queue exists, durable, on a channel of its own (a
// failed declare closes its channel). An existing queue is used as it is.
func declare(conn *amqp.Connection, queue string, args amqp.Table) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	_ = ch.Close()
	if err == nil {
		return nil
	}
	if amqpErr, ok := errors.AsType[*amqp.Error](err); !ok || amqpErr.Code != amqp.NotFound {
		return fmt.Errorf("check queue %q: %w", queue, err)
	}
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %q: %w", queue, err)
	}
	return nil
}
