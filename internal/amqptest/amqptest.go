// Package amqptest gives tests queues of their own on the real RabbitMQ
// (SLESS_TEST_AMQP, default amqp://guest:guest@127.0.0.1:5672/), deleted
// when the test ends, and rabbitmqctl to close connections as a broker
// restart does. In CI the broker must be there; elsewhere a test without
// it is skipped with the reason.
package amqptest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	amqp "github.com/rabbitmq/amqp091-go"
)

// URL is the broker's URL.
func URL() string {
	if u := os.Getenv("SLESS_TEST_AMQP"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Channel opens a channel on the broker, closed when the test ends.
func Channel(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		needs.Missing(t, "RabbitMQ at %s (hack/services.sh starts it): %v", URL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

var names atomic.Int64

// Name is a name no other test, in this process or another, uses.
func Name(what string) string {
	return fmt.Sprintf("sless-test-%s-%d-%d", what, os.Getpid(), names.Add(1))
}

// Queue declares a durable queue of a new name, deleted at cleanup.
func Queue(t testing.TB, ch *amqp.Channel, what string) string {
	t.Helper()
	name := Name(what)
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	DeleteAtCleanup(t, ch, name)
	return name
}

// QuorumQueue declares a quorum queue of a new name, deleted at cleanup.
func QuorumQueue(t testing.TB, ch *amqp.Channel, what string) string {
	t.Helper()
	name := Name(what)
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	DeleteAtCleanup(t, ch, name)
	return name
}

// DeleteAtCleanup deletes queues, if they exist, when the test ends.
func DeleteAtCleanup(t testing.TB, ch *amqp.Channel, queues ...string) {
	t.Cleanup(func() {
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
}

// Publish publishes bodies to queue as persistent messages, each with a
// message id of its index, and waits for the broker to confirm them.
func Publish(t testing.TB, ch *amqp.Channel, queue string, bodies ...[]byte) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	confirms := make([]*amqp.DeferredConfirmation, 0, len(bodies))
	for i, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			MessageId: fmt.Sprint(i), ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: b,
			Headers: amqp.Table{"x-test": "kept"},
		})
		if err != nil {
			t.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// Take takes the next message of queue, acknowledged, failing the test
// when there is none.
func Take(t testing.TB, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("queue %s: no message (%v)", queue, err)
	}
	return d
}

// Depth is how many messages in queue are ready.
func Depth(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Messages
}

// Ctl runs rabbitmqctl with args and returns its output.
func Ctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		needs.Missing(t, "a working rabbitmqctl: rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Connections returns the Erlang pids of the broker's connections whose
// connection_name holds mark.
func Connections(t testing.TB, mark string) []string {
	t.Helper()
	var pids []string
	for line := range strings.Lines(Ctl(t, "-q", "--no-table-headers", "list_connections", "pid", "client_properties")) {
		if pid, props, ok := strings.Cut(line, "\t"); ok && strings.Contains(props, mark) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CloseConnections closes the connections Connections finds for mark, as
// a broker restart does, and returns how many it closed.
func CloseConnections(t testing.TB, mark string) int {
	t.Helper()
	pids := Connections(t, mark)
	for _, pid := range pids {
		Ctl(t, "close_connection", pid, "sless test: broker restart")
	}
	return len(pids)
}

// QueueType is the type of queue (classic, quorum), as rabbitmqctl tells.
func QueueType(t testing.TB, queue string) string {
	t.Helper()
	for line := range strings.Lines(Ctl(t, "-q", "--no-table-headers", "list_queues", "name", "type")) {
		if name, typ, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && name == queue {
			return typ
		}
	}
	t.Fatalf("queue %s not listed by rabbitmqctl", queue)
	return ""
}
