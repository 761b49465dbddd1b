package activator

import (
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/internal/amqppub"
	"sless.dev/sless/internal/amqpurl"
	"sless.dev/sless/runs"
)

const (
	// publishBatch bounds the answers one look hands the broker: those
	// are held, locked, until the broker confirmed them.
	publishBatch = 100
	// publishTimeout bounds one look: its store calls and publishes.
	publishTimeout = 30 * time.Second
	// maxPublishBackoff bounds the wait after failed looks.
	maxPublishBackoff = 30 * time.Second
	// brokerDialTimeout bounds a dial of the broker, its TCP and AMQP
	// handshakes.
	brokerDialTimeout = 5 * time.Second
)

// publishAnswers publishes the answers of ended runs to the queues their
// functions' onSuccess and onFailure name, on the broker at
// RunsConfig.BrokerURL, until ctx ends. It looks every Interval, and at
// once when an attempt here ended a run with an answer to publish; it goes
// on at once while there are more, and after a failure waits twice as
// long as the last time, up to maxPublishBackoff. An answer stays with its
// run until the broker confirmed it: one not published now is by a later
// look, here or in another activator.
func (a *Activator) publishAnswers(ctx context.Context) {
	r := a.runs
	p := &publisher{url: r.cfg.BrokerURL}
	defer p.close()
	wait := time.NewTimer(0)
	defer wait.Stop()
	backoff := time.Duration(0)
	for {
		wake := r.toPublish
		if backoff > 0 {
			wake = nil // a failing broker is not tried at every run's end
		}
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		case <-wake:
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		n, err := r.store.Publish(lctx, publishBatch, p.send)
		cancel()
		r.metrics.published.Add(float64(n))
		switch {
		case err != nil && backoff == 0:
			a.log.Warn("runs: answers cannot be published; they wait, kept with their runs", "broker", amqpurl.Redact(p.url), "err", err)
		case err == nil && backoff > 0:
			a.log.Info("runs: answers are published again", "broker", amqpurl.Redact(p.url))
		}
		switch {
		case err != nil:
			backoff = min(max(2*backoff, r.cfg.Interval), maxPublishBackoff)
			wait.Reset(backoff)
		case n == publishBatch:
			backoff = 0
			wait.Reset(0) // more wait
		default:
			backoff = 0
			wait.Reset(r.cfg.Interval)
		}
	}
}

// publisher publishes answers over one connection to the broker, dialed
// when there is one to publish, and again after a failure.
type publisher struct {
	url  string
	conn *amqp.Connection
	pub  *amqppub.Publisher
}

// send publishes ps in their order, each confirmed before the next: a
// runs.Sender.
func (p *publisher) send(ctx context.Context, ps []runs.Publication) (int, error) {
	if err := p.connect(); err != nil {
		return 0, err
	}
	for i := range ps {
		err := p.pub.Publish(ctx, amqppub.Queue{Name: ps[i].Queue, Declare: true}, message(&ps[i]))
		if err != nil {
			p.close() // a failed publish may have closed its channel: start again
			return i, fmt.Errorf("run %s: %w", ps[i].Run.ID, err)
		}
	}
	return len(ps), nil
}

// connect dials the broker when no connection is open.
func (p *publisher) connect() error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	p.close()
	host, _ := os.Hostname()
	conn, err := amqp.DialConfig(p.url, amqp.Config{
		Dial:       amqp.DefaultDial(brokerDialTimeout),
		Properties: amqp.Table{"product": "sless", "connection_name": "sless activator run answers, " + host},
	})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", amqpurl.Redact(p.url), err)
	}
	pub, err := amqppub.New(conn)
	if err != nil {
		_ = conn.Close()
		return err
	}
	p.conn, p.pub = conn, pub
	return nil
}

func (p *publisher) close() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.pub = nil, nil
}

// message is an answer's message: its body and content type as the
// function gave them, the run's id as its message id, what ended the run
// in its headers, persistent.
func message(p *runs.Publication) amqp.Publishing {
	msg := amqp.Publishing{MessageId: string(p.Run.ID), ContentType: p.Result.ContentType, DeliveryMode: amqp.Persistent,
		AppId: "sless", Headers: amqp.Table(p.Headers()), Body: p.Result.Body}
	if p.Run.CompletedAt != nil {
		msg.Timestamp = *p.Run.CompletedAt
	}
	return msg
}
