// Package amqppub publishes messages to RabbitMQ queues so that a publish
// is done only once the broker has taken the message: on a channel in
// confirm mode, mandatory (a message no queue takes comes back, an error),
// declaring a queue the first time it is used when asked to. The
// queue-proxy's consumers publish their retries and dead letters with it,
// the activators the answers of ended runs (onSuccess, onFailure).
package amqppub

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Queue is where a message is published.
type Queue struct {
	Name string
	// Declare makes the queue, durable and with Args, when it is
	// missing; an existing queue is used as it is. Without it a missing
	// queue is an error: the message is returned.
	Declare bool
	Args    amqp.Table
}

// Publisher publishes on one connection, one message at a time: each
// waits for its confirm, and a return is known to be its message's.
type Publisher struct {
	conn    *amqp.Connection
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	// declared holds the queues declared on this connection.
	declared map[string]bool
}

// New opens a publishing channel on conn. The publisher is done with the
// connection: a closed one fails every publish after.
func New(conn *amqp.Connection) (*Publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &Publisher{conn: conn, ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1)), declared: map[string]bool{}}, nil
}

// Declare makes q when it is missing, before a message needs it: a queue
// another one dead-letters to, say, since the broker drops what it
// dead-letters to no queue.
func (p *Publisher) Declare(q Queue) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.declare(q)
}

// declare makes q when it is missing and not yet declared here; p.mu is
// held.
func (p *Publisher) declare(q Queue) error {
	if p.declared[q.Name] {
		return nil
	}
	if err := declare(p.conn, q); err != nil {
		return err
	}
	p.declared[q.Name] = true
	return nil
}

// Publish sends msg to q, through the default exchange, and returns once
// the broker confirmed it, or ctx ended.
func (p *Publisher) Publish(ctx context.Context, q Queue, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q.Declare {
		if err := p.declare(q); err != nil {
			return err
		}
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, true, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %q: %w", q.Name, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm of publish to %q: %w", q.Name, err)
	}
	if !ok {
		return fmt.Errorf("publish to %q: refused by the broker", q.Name)
	}
	// A return comes before its confirm: one now is this message's.
	select {
	case r := <-p.returns:
		delete(p.declared, q.Name) // deleted since: declared again next time
		return fmt.Errorf("publish to %q: returned: %s", q.Name, r.ReplyText)
	default:
	}
	return nil
}

// declare makes sure q exists, on a channel of its own (a failed declare
// closes its channel).
func declare(conn *amqp.Connection, q Queue) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
	_ = ch.Close()
	if err == nil {
		return nil
	}
	if amqpErr, ok := errors.AsType[*amqp.Error](err); !ok || amqpErr.Code != amqp.NotFound {
		return fmt.Errorf("check queue %q: %w", q.Name, err)
	}
	if ch, err = conn.Channel(); err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args); err != nil {
		return fmt.Errorf("declare queue %q: %w", q.Name, err)
	}
	return nil
}
