package queuedepth

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
)

// TestWaker: a parked function is woken by the first message on any of
// its queues, once, and the message stays first in its queue, marked
// redelivered; an unparked one is not woken.
func TestWaker(t *testing.T) {
	ch := amqptest.Channel(t)
	b := NewBrokers(OneBroker(brokerURL), discard)
	t.Cleanup(func() { _ = b.Close() })
	w := NewWaker(b, discard)
	t.Cleanup(w.Close)
	quiet, busy, other := declare(t, ch, 0), declare(t, ch, 0), declare(t, ch, 0)

	woken := make(chan string, 4)
	// Two brokers (of the same URL here): the first message on either wakes.
	w.Park(types.NamespacedName{Namespace: "ns", Name: "fn"}, map[string][]string{"ns/a": {quiet}, "ns/b": {busy}}, func() { woken <- "fn" })
	w.Park(types.NamespacedName{Namespace: "ns", Name: "other"}, map[string][]string{"": {other}}, func() { woken <- "other" })
	w.Park(types.NamespacedName{Namespace: "ns", Name: "gone"}, map[string][]string{"": {quiet}}, func() { woken <- "gone" })
	w.Unpark(types.NamespacedName{Namespace: "ns", Name: "gone"})
	waitConsumers(t, ch, busy, 1)
	publish(t, ch, busy, "first", "second")

	select {
	case who := <-woken:
		if who != "fn" {
			t.Fatalf("woken %s, want fn", who)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not woken by a message")
	}
	waitConsumers(t, ch, busy, 0)
	waitConsumers(t, ch, quiet, 0) // the other broker's consumer ended too
	msg, ok, err := ch.Get(busy, true)
	if err != nil || !ok || string(msg.Body) != "first" || !msg.Redelivered {
		t.Fatalf("first message after the wake: %q redelivered %v (%v, %v); want \"first\", redelivered", msg.Body, msg.Redelivered, ok, err)
	}
	select {
	case who := <-woken:
		t.Fatalf("%s woken again, or woken without a message", who)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestWaitMessageMissingQueue names the queue that is not there.
func TestWaitMessageMissingQueue(t *testing.T) {
	amqptest.Channel(t)
	r := New(brokerURL, discard)
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	missing := amqptest.Name("missing")
	if err := r.WaitMessage(ctx, []string{missing}); err == nil || !strings.Contains(err.Error(), missing+`" not found`) {
		t.Fatalf("WaitMessage on a missing queue: %v", err)
	}
}

func publish(t *testing.T, ch *amqp.Channel, queue string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := ch.PublishWithContext(context.Background(), "", queue, true, false, amqp.Publishing{Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitConsumers waits until queue has n consumers.
func waitConsumers(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	var q amqp.Queue
	var err error
	if !eventually.Holds(eventually.Within, func() bool {
		q, err = ch.QueueDeclarePassive(queue, false, false, false, false, amqp.Table{"x-expires": int32(60_000)})
		return err == nil && q.Consumers == n
	}) {
		t.Fatalf("queue %s: %d consumers (%v), want %d", queue, q.Consumers, err, n)
	}
}
