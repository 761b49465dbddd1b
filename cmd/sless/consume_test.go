package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

// TestQueueProxyKilledMidBatch: a queue-proxy killed with messages at the
// function settles none of them; the broker delivers them all again, to
// the next instance, and none is lost.
func TestQueueProxyKilledMidBatch(t *testing.T) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "killed")
	const n = 20
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i], _ = json.Marshal(testfn.Message{ID: fmt.Sprint(i), Block: true})
	}
	amqptest.Publish(t, ch, queue, bodies...)

	fn := testfn.Start(t)
	env := []string{"AMQP_URL=" + amqptest.URL(),
		fmt.Sprintf(`SLESS_RABBITMQ_TRIGGERS=[{"name":"orders","queue":%q,"urlEnv":"AMQP_URL","prefetch":5,"maxRetries":3}]`, queue)}
	run := func() *exec.Cmd {
		serving, admin := testfn.FreePort(t), testfn.FreePort(t)
		cmd, _ := startSless(t, nil, append(queueProxyEnv(fn, serving, admin), env...), "queue-proxy", "--function", "killed")
		return cmd
	}
	delivered := func() map[string]testfn.Deliveries { return delivered(t, fn) }
	qp := run()
	eventually.True(t, "5 messages at the function", func() bool { return len(delivered()) == 5 })
	if err := qp.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "every message back in the queue", func() bool { return amqptest.Depth(t, ch, queue) == n })
	first := delivered()

	for i := range n { // from now on no message blocks
		resp, err := http.Get("http://" + fn.Addr() + "/release?id=" + fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	run()
	eventually.True(t, "every message processed, the queue empty", func() bool {
		return len(delivered()) == n && amqptest.Depth(t, ch, queue) == 0
	})
	got := delivered()
	for id := range first {
		if c := got[id].Count; c != 2 {
			t.Errorf("message %s, in flight at the kill, delivered %d times, want twice", id, c)
		}
	}
}

// delivered is what fn saw of each message.
func delivered(t *testing.T, fn *testfn.Process) map[string]testfn.Deliveries {
	t.Helper()
	resp, err := http.Get("http://" + fn.Addr() + "/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]testfn.Deliveries
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQuorumBoundsInstanceKiller: a message that kills its whole instance
// (queue-proxy included) each time it is delivered is settled by no one;
// on a quorum queue the broker counts its returns, and past the queue's
// x-delivery-limit dead-letters it to the trigger's dead-letter queue,
// which the queue-proxy declared (a quorum queue too) before it was needed.
func TestQuorumBoundsInstanceKiller(t *testing.T) {
	ch := amqptest.Channel(t)
	queue, dlq := amqptest.Name("quorum"), amqptest.Name("dlq")
	const limit = 2
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum",
		"x-delivery-limit": limit, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}); err != nil {
		t.Fatal(err)
	}
	amqptest.DeleteAtCleanup(t, ch, queue, dlq)
	body, _ := json.Marshal(testfn.Message{ID: "killer", Block: true})
	amqptest.Publish(t, ch, queue, body)

	fn := testfn.Start(t)
	env := []string{"AMQP_URL=" + amqptest.URL(), fmt.Sprintf(`SLESS_RABBITMQ_TRIGGERS=[{"name":"orders","queue":%q,"urlEnv":"AMQP_URL",`+
		`"prefetch":5,"maxRetries":3,"deadLetterQueue":%q,"queueType":"quorum"}]`, queue, dlq)}
	for delivery := 1; delivery <= limit+1; delivery++ {
		serving, admin := testfn.FreePort(t), testfn.FreePort(t)
		qp, _ := startSless(t, nil, append(queueProxyEnv(fn, serving, admin), env...), "queue-proxy", "--function", "killed")
		eventually.True(t, fmt.Sprintf("delivery %d at the function", delivery), func() bool {
			return delivered(t, fn)["killer"].Count == delivery
		})
		if err := qp.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "the killer dead-lettered by the broker", func() bool { return amqptest.Depth(t, ch, dlq) == 1 })
	msg, _, err := ch.Get(dlq, true)
	if err != nil || msg.Headers["x-first-death-reason"] != "delivery_limit" {
		t.Errorf("dead-lettered with %v (%v), want the broker's reason delivery_limit", msg.Headers, err)
	}
	if typ := amqptest.QueueType(t, dlq); typ != "quorum" {
		t.Errorf("the dead-letter queue is a %s queue, want quorum as the trigger's", typ)
	}
	if d := amqptest.Depth(t, ch, queue); d != 0 {
		t.Errorf("queue depth %d, want 0", d)
	}
}
