package consumer

import (
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// acker settles a channel's deliveries for the handlers, which end out of
// order, and acknowledges those that end in order with one multiple ack:
// under load the broker gets one ack a batch, not one a message. A
// delivery that ends before one delivered earlier is acknowledged alone,
// so that a slow message holds no other message's prefetch slot.
type acker struct {
	ch   *amqp.Channel
	log  *slog.Logger
	in   chan settle
	done chan struct{}
	next uint64           // the lowest delivery tag not settled
	held map[uint64]state // settled above next, by tag
}

type settle struct {
	tag uint64
	ack bool // else requeue
}

type state uint8

const (
	pending state = iota // to acknowledge
	sent                 // acknowledged or requeued
)

// newAcker settles the deliveries of ch, at most prefetch at a time, until
// close.
func newAcker(ch *amqp.Channel, prefetch int, log *slog.Logger) *acker {
	a := &acker{ch: ch, log: log, in: make(chan settle, prefetch), done: make(chan struct{}),
		next: 1, held: make(map[uint64]state, prefetch)}
	go a.run()
	return a
}

// Ack and Requeue settle a delivery. They do not block for long: the
// channel holds as many as the prefetch.
func (a *acker) Ack(tag uint64)     { a.in <- settle{tag, true} }
func (a *acker) Requeue(tag uint64) { a.in <- settle{tag, false} }

// close settles what is left and stops.
func (a *acker) close() {
	close(a.in)
	<-a.done
}

func (a *acker) run() {
	defer close(a.done)
	for s := range a.in {
		a.take(s)
		for more := true; more; {
			select {
			case s, ok := <-a.in:
				if !ok {
					a.flush()
					return
				}
				a.take(s)
			default:
				more = false
			}
		}
		a.flush()
	}
}

func (a *acker) take(s settle) {
	if s.ack {
		a.held[s.tag] = pending
		return
	}
	// Back to the queue at once: it is the next one delivered.
	if err := a.ch.Nack(s.tag, false, true); err != nil {
		a.log.Warn("requeue failed; the broker returns the message when the channel closes", "err", err)
	}
	a.held[s.tag] = sent
}

// flush acknowledges the settled deliveries: those from next on in one
// multiple ack, up to the last pending of them, the others alone.
func (a *acker) flush() {
	var upTo uint64
	for st, ok := a.held[a.next]; ok; st, ok = a.held[a.next] {
		if st == pending {
			upTo = a.next
		}
		delete(a.held, a.next)
		a.next++
	}
	if upTo > 0 {
		a.send(upTo, true)
	}
	for tag, st := range a.held {
		if st == pending {
			a.send(tag, false)
			a.held[tag] = sent
		}
	}
}

func (a *acker) send(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		a.log.Warn("ack failed; the broker delivers the messages again", "err", err)
	}
}
