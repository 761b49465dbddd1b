package consumer

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqppub"
)

// publisher publishes the messages a consumer retries and dead-letters,
// each confirmed before the delivery it replaces is acknowledged.
// Publishing is the failure path only, so it is not worth pipelining.
type publisher struct {
	pub    *amqppub.Publisher
	queue  string // the consumed queue, where retries return
	quorum bool   // declare quorum queues, as the consumed one
}

func newPublisher(conn *amqp.Connection, queue string, quorum bool) (*publisher, error) {
	pub, err := amqppub.New(conn)
	if err != nil {
		return nil, err
	}
	return &publisher{pub: pub, queue: queue, quorum: quorum}, nil
}

// retry puts msg in the retry queue of wait, whose messages expire after
// wait back into the consumed queue (its dead-letter route): the backoff
// holds no slot of the consumer, and survives the instance.
func (p *publisher) retry(msg amqp.Publishing, wait time.Duration) error {
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
	return p.publish(p.declared(retryQueueName(p.queue, wait), args), msg)
}

// sendBack puts msg back in the consumed queue, at its tail. The consumed
// queue is the user's and never declared: a message sent back to it is
// returned if it is gone.
func (p *publisher) sendBack(msg amqp.Publishing) error {
	return p.publish(amqppub.Queue{Name: p.queue}, msg)
}

// deadLetter puts msg in the dead-letter queue, declared when missing.
func (p *publisher) deadLetter(msg amqp.Publishing, dlq string) error {
	return p.publish(p.declared(dlq, nil), msg)
}

// declareDeadLetter declares the dead-letter queue when missing, before it
// is needed: the consumed queue's own dead-letter route (a quorum queue's
// delivery limit) may lead there, and the broker drops what it
// dead-letters to no queue.
func (p *publisher) declareDeadLetter(dlq string) error {
	return p.pub.Declare(p.declared(dlq, nil))
}

// declared is a queue of the consumer's own, declared when missing with
// args and the consumed queue's type.
func (p *publisher) declared(name string, args amqp.Table) amqppub.Queue {
	if p.quorum {
		if args == nil {
			args = amqp.Table{}
		}
		args["x-queue-type"] = string(v1alpha1.QueueQuorum)
	}
	return amqppub.Queue{Name: name, Declare: true, Args: args}
}

// publish publishes msg to q, waiting confirmTimeout at most.
func (p *publisher) publish(q amqppub.Queue, msg amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	return p.pub.Publish(ctx, q, msg)
}
