package queueproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/queueproxy/consumer"
)

// consuming starts a queue-proxy that consumes a new queue with trigger t
// (name, queue and URL filled in), and returns it with the queue.
func consuming(t *testing.T, ch *amqp.Channel, trigger wire.RabbitMQTrigger, mutate func(*Config)) (*harness, string) {
	t.Helper()
	if trigger.QueueType == v1alpha1.QueueQuorum {
		trigger.Queue = amqptest.QuorumQueue(t, ch, "consume")
	} else {
		trigger.Queue = amqptest.Queue(t, ch, "consume")
	}
	trigger.Name = strings.ReplaceAll(trigger.Queue, "sless-test-", "t")
	trigger.URLEnv = "AMQP_URL"
	if trigger.Prefetch == 0 {
		trigger.Prefetch = 10
	}
	h := startProxy(t, func(c *Config) {
		c.RabbitMQ = []RabbitMQ{{RabbitMQTrigger: trigger, URL: amqptest.URL()}}
		c.RetryBackoff = 20 * time.Millisecond
		if mutate != nil {
			mutate(c)
		}
		amqptest.DeleteAtCleanup(t, ch, consumer.RetryQueues(trigger.Queue, c.RetryBackoff, trigger.MaxRetries)...)
		if trigger.DeadLetterQueue != "" {
			amqptest.DeleteAtCleanup(t, ch, trigger.DeadLetterQueue)
		}
	})
	eventually.True(t, "consuming", func() bool {
		s := h.srv.Consumers()
		return len(s) == 1 && s[0].State == consumer.StateConsuming
	})
	return h, trigger.Queue
}

func messages(ms ...testfn.Message) [][]byte {
	out := make([][]byte, len(ms))
	for i, m := range ms {
		out[i], _ = json.Marshal(m)
	}
	return out
}

// deliveries is what the function process saw of each message.
func (h *harness) deliveries() map[string]testfn.Deliveries {
	h.t.Helper()
	_, body := h.get("http://"+h.fn.Addr(), "/messages")
	var out map[string]testfn.Deliveries
	if err := json.Unmarshal(body, &out); err != nil {
		h.t.Fatalf("/messages: %v: %s", err, body)
	}
	return out
}

// release opens the gates of blocked messages ids at the function's
// process now running; a restart closes them again. A process that is
// down is no error: the next call opens the gates of the next one.
func (h *harness) release(ids ...string) {
	for _, id := range ids {
		resp, err := h.client.Get("http://" + h.fn.Addr() + "/release?id=" + id)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// results reads sless_queue_messages_total of queue by result.
func (h *harness) results(queue, result string) int {
	h.t.Helper()
	return int(h.counter("sless_queue_messages_total", "queue", queue, "result", result))
}

// counter reads the counter name whose labels include pairs.
func (h *harness) counter(name string, pairs ...string) float64 {
	h.t.Helper()
	fams, err := h.srv.registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.Metric {
			for i := 0; i < len(pairs); i += 2 {
				if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] }) {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func (h *harness) waitResults(queue, result string, n int) {
	h.t.Helper()
	eventually.True(h.t, fmt.Sprintf("%d messages %s", n, result), func() bool { return h.results(queue, result) >= n })
}

// TestConsume: every message is one POST with the message's body, content
// type and headers, acked after the function's 2xx, with no more at once
// than concurrency when it caps prefetch.
func TestConsume(t *testing.T) {
	ch := amqptest.Channel(t)
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 10}, func(c *Config) { c.Concurrency = 3 })
	const n = 200
	ms := make([]testfn.Message, n)
	for i := range ms {
		ms[i] = testfn.Message{ID: fmt.Sprint(i), SleepMs: 2}
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	h.waitResults(queue, "acked", n)

	got := h.deliveries()
	for i := range n {
		if d := got[fmt.Sprint(i)]; d.Count != 1 {
			t.Fatalf("message %d delivered %d times, want once", i, d.Count)
		}
	}
	hd := http.Header(got["7"].Headers)
	for k, want := range map[string]string{
		"Content-Type": "application/json", wire.MessageIDHeader: "7", wire.DeliveryCountHeader: "1",
		wire.QueueHeader: queue, wire.TriggerHeader: h.srv.cfg.RabbitMQ[0].Name, wire.RoutingKeyHeader: queue,
	} {
		if hd.Get(k) != want {
			t.Errorf("header %s = %q, want %q", k, hd.Get(k), want)
		}
	}
	if _, body := h.get("http://"+h.fn.Addr(), "/max"); string(body) != "3" && string(body) != "2" && string(body) != "1" {
		t.Errorf("most messages at the function at once = %s, want at most the concurrency, 3", body)
	}
	if d := amqptest.Depth(t, ch, queue); d != 0 {
		t.Errorf("queue depth = %d after all were acked, want 0", d)
	}
	if c := h.counter("sless_queueproxy_requests_total", "code", "200"); c != n {
		t.Errorf("sless_queueproxy_requests_total{code=200} = %v, want the %d messages", c, n)
	}
}

// TestConsumeRetries: a message that fails twice succeeds on its third
// delivery; one that always fails is dead-lettered after maxRetries with
// its body, headers and the last error; with no dead-letter queue it is
// dropped, counted.
func TestConsumeRetries(t *testing.T) {
	ch := amqptest.Channel(t)
	dlq := amqptest.Name("dlq")
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{MaxRetries: 3, DeadLetterQueue: dlq}, nil)
	amqptest.Publish(t, ch, queue, messages(testfn.Message{ID: "flaky", Fail: 2}, testfn.Message{ID: "poison", Fail: -1})...)
	h.waitResults(queue, "dead_lettered", 1)
	h.waitResults(queue, "acked", 1)

	got := h.deliveries()
	if d := got["flaky"]; d.Count != 3 || http.Header(d.Headers).Get(wire.DeliveryCountHeader) != "3" {
		t.Errorf("flaky: %d deliveries, the last counted %q; want 3, \"3\"", d.Count, http.Header(d.Headers).Get(wire.DeliveryCountHeader))
	}
	if d := got["poison"]; d.Count != 4 {
		t.Errorf("poison: %d deliveries, want 1 + maxRetries = 4", d.Count)
	}
	if r := h.results(queue, "retried"); r != 2+3 {
		t.Errorf("retried = %d, want 5", r)
	}
	msg := amqptest.Take(t, ch, dlq)
	var body testfn.Message
	if err := json.Unmarshal(msg.Body, &body); err != nil || body.ID != "poison" {
		t.Errorf("dead-lettered body %q, want the poison message's", msg.Body)
	}
	if msg.MessageId != "1" || msg.ContentType != "application/json" || msg.Headers["x-test"] != "kept" {
		t.Errorf("dead-lettered properties: id %q, type %q, headers %v; want the original's", msg.MessageId, msg.ContentType, msg.Headers)
	}
	if e, _ := msg.Headers[consumer.ErrorHeader].(string); !strings.Contains(e, "delivery 4 of poison fails") ||
		msg.Headers[consumer.StatusHeader] != int32(500) || msg.Headers[consumer.AttemptsHeader] != int32(4) {
		t.Errorf("dead-letter headers %v: want the last error, status 500 and 4 attempts", msg.Headers)
	}
	if d := amqptest.Depth(t, ch, queue); d != 0 {
		t.Errorf("queue depth = %d, want 0", d)
	}

	t.Run("no dead-letter queue", func(t *testing.T) {
		h, queue := consuming(t, ch, wire.RabbitMQTrigger{MaxRetries: 1}, nil)
		amqptest.Publish(t, ch, queue, messages(testfn.Message{ID: "poison", Fail: -1})...)
		h.waitResults(queue, "dropped", 1)
		if d := h.deliveries()["poison"]; d.Count != 2 {
			t.Errorf("poison: %d deliveries, want 2", d.Count)
		}
	})
}

// TestRetryDoesNotBlock: a message waiting out its backoff holds no slot:
// at prefetch 1, the messages behind it are served meanwhile.
func TestRetryDoesNotBlock(t *testing.T) {
	ch := amqptest.Channel(t)
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 1, MaxRetries: 1},
		func(c *Config) { c.RetryBackoff = 2 * time.Second })
	ms := []testfn.Message{{ID: "poison", Fail: -1}}
	for i := range 20 {
		ms = append(ms, testfn.Message{ID: fmt.Sprint(i)})
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	h.waitResults(queue, "acked", 20)
	if d := h.deliveries()["poison"]; d.Count != 1 {
		t.Errorf("the failing message was delivered %d times before the 20 behind it were served, want once: its backoff held the slot", d.Count)
	}
	h.waitResults(queue, "dropped", 1)
}

// TestConsumeReconnects: the broker closing the connection mid-stream (as
// a restart does) loses nothing; the consumer reconnects and the instance
// stays ready for HTTP meanwhile.
func TestConsumeReconnects(t *testing.T) {
	ch := amqptest.Channel(t)
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 5}, nil)
	const n = 300
	ms := make([]testfn.Message, n)
	for i := range ms {
		ms[i] = testfn.Message{ID: fmt.Sprint(i), SleepMs: 5}
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	h.waitResults(queue, "acked", 30)
	if amqptest.CloseConnections(t, h.srv.cfg.RabbitMQ[0].Name) != 1 {
		t.Fatal("want the consumer's one connection on the broker")
	}
	if !h.srv.Ready() {
		t.Error("the instance is not ready for HTTP while its consumer reconnects")
	}
	eventually.True(t, "every message processed", func() bool {
		got := h.deliveries()
		for i := range n {
			if got[fmt.Sprint(i)].Count == 0 {
				return false
			}
		}
		return true
	})
	eventually.True(t, "consuming again", func() bool { return h.srv.Consumers()[0].State == consumer.StateConsuming })
	eventually.True(t, "queue empty", func() bool { return amqptest.Depth(t, ch, queue) == 0 })
}

// TestConsumeDrain: on SIGTERM the consumer is cancelled first, the
// messages in flight finish and are acked, and deliveries not started
// return to the queue, undelivered to the function.
func TestConsumeDrain(t *testing.T) {
	ch := amqptest.Channel(t)
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 10}, func(c *Config) { c.Concurrency = 4 })
	var ms []testfn.Message
	for i := range 30 {
		ms = append(ms, testfn.Message{ID: fmt.Sprint(i), Block: true})
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	eventually.True(t, "4 messages at the function", func() bool { return len(h.deliveries()) == 4 })

	h.cancel()
	eventually.True(t, "draining", func() bool { return !h.srv.Ready() })
	for id := range h.deliveries() {
		h.get("http://"+h.fn.Addr(), "/release?id="+id)
	}
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("queue-proxy did not drain")
	}
	if a := h.results(queue, "acked"); a != 4 {
		t.Errorf("acked %d, want the 4 in flight", a)
	}
	if d := amqptest.Depth(t, ch, queue); d != 26 {
		t.Errorf("queue depth after the drain = %d, want the 26 not started", d)
	}
}

// TestConsumerFailing: a missing queue or refused credentials show in the
// consumer's status, naming the cause, and the instance serves HTTP.
func TestConsumerFailing(t *testing.T) {
	amqptest.Channel(t) // the broker is there
	for _, tt := range []struct{ name, url, queue, want string }{
		{"missing queue", amqptest.URL(), "sless-test-no-such-queue", `queue "sless-test-no-such-queue" not found`},
		{"bad credentials", strings.Replace(amqptest.URL(), "guest:guest", "guest:wrong", 1), "q", "credentials refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, func(c *Config) {
				c.RabbitMQ = []RabbitMQ{{URL: tt.url, RabbitMQTrigger: wire.RabbitMQTrigger{Name: "orders", Queue: tt.queue, Prefetch: 1}}}
			})
			eventually.True(t, "failing", func() bool {
				s := h.srv.Consumers()
				return len(s) == 1 && s[0].State == consumer.StateFailing && strings.Contains(s[0].Error, tt.want)
			})
			if s := h.srv.Consumers()[0]; strings.Contains(s.Error, "wrong") {
				t.Errorf("status error %q quotes the password", s.Error)
			}
			if resp, _ := h.get(h.url, "/echo"); resp.StatusCode != http.StatusOK {
				t.Errorf("HTTP while the consumer fails: %d", resp.StatusCode)
			}
		})
	}
}

// TestSlowMessageHoldsNoSlot: deliveries that end after one delivered
// before them are acknowledged at once, so that a slow message holds its
// own prefetch slot only and the others keep flowing.
func TestSlowMessageHoldsNoSlot(t *testing.T) {
	ch := amqptest.Channel(t)
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 2}, nil)
	ms := []testfn.Message{{ID: "slow", Block: true}}
	for i := range 20 {
		ms = append(ms, testfn.Message{ID: fmt.Sprint(i)})
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	h.waitResults(queue, "acked", 20)
	h.get("http://"+h.fn.Addr(), "/release?id=slow")
	h.waitResults(queue, "acked", 21)
	if d := amqptest.Depth(t, ch, queue); d != 0 {
		t.Errorf("queue depth = %d, want 0", d)
	}
}

// TestCrashSparesOthers: a message whose handler kills the runtime, in
// flight with four healthy ones (prefetch 5), spends only its own
// attempts. All five are sent back to run alone, spending none; the
// healthy ones are processed; the dead-letter queue holds the culprit
// alone, after 1 + maxRetries crashes of its own. The queue then runs at
// full concurrency again. Every message blocks until the test releases
// it, so that the crash finds all five at the process however slow the
// machine.
func TestCrashSparesOthers(t *testing.T) {
	ch := amqptest.Channel(t)
	dlq := amqptest.Name("dlq")
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{Prefetch: 5, MaxRetries: 2, DeadLetterQueue: dlq}, nil)
	h.fn.RestartOnExit()
	ms := []testfn.Message{{ID: "poison", Block: true, Exit: true}}
	ids := []string{"poison"}
	for i := range 4 {
		ms = append(ms, testfn.Message{ID: fmt.Sprint(i), Block: true})
		ids = append(ids, fmt.Sprint(i))
	}
	amqptest.Publish(t, ch, queue, messages(ms...)...)
	eventually.True(t, "the 5 messages at the process", func() bool { return len(h.deliveries()) == 5 })
	h.release("poison")
	h.waitResults(queue, "isolated", 5)
	// Each runs alone now, in the process the crash left, which blocks
	// them again until released, and in those the culprit's crashes leave.
	eventually.True(t, "the culprit dead-lettered and the others acked", func() bool {
		h.release(ids...)
		return h.results(queue, "dead_lettered") == 1 && h.results(queue, "acked") == 4
	})

	if r := h.results(queue, "retried"); r != 2 {
		t.Errorf("retried = %d, want the culprit's 2 retries alone", r)
	}
	if n := h.results(queue, "isolated"); n != 5 {
		t.Errorf("isolated = %d, want the 5 messages in flight at the first crash alone", n)
	}
	if d := amqptest.Depth(t, ch, dlq); d != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want the culprit alone", d)
	}
	msg := amqptest.Take(t, ch, dlq)
	var body testfn.Message
	if err := json.Unmarshal(msg.Body, &body); err != nil || body.ID != "poison" {
		t.Errorf("dead-lettered %q, want the poison message", msg.Body)
	}
	if msg.Headers[consumer.AttemptsHeader] != int32(3) || msg.Headers[consumer.StatusHeader] != int32(502) ||
		msg.Headers[consumer.IsolateHeader] != "crashed" {
		t.Errorf("dead-letter headers %v: want 3 attempts, status 502, marked crashed", msg.Headers)
	}
	// The last crash's restart may still be under way.
	eventually.Holds(10*time.Second, func() bool { return h.fn.Starts() >= 5 })
	if s := h.fn.Starts(); s != 5 {
		t.Errorf("the function process started %d times, want 5: the first start, then one the shared crash, and one each crash of the culprit's 3", s)
	}

	// Back to normal: messages share the process again.
	var more []testfn.Message
	for i := range 5 {
		more = append(more, testfn.Message{ID: fmt.Sprint("more", i), Block: true})
	}
	amqptest.Publish(t, ch, queue, messages(more...)...)
	eventually.True(t, "the 5 new messages at the process together", func() bool {
		n := 0
		for id := range h.deliveries() {
			if strings.HasPrefix(id, "more") {
				n++
			}
		}
		return n == 5
	})
	for _, m := range more {
		h.release(m.ID)
	}
	h.waitResults(queue, "acked", 9)
}

// TestRefusedSpendsNoAttempt: messages that reach no process (it is down)
// spend no attempt: they are sent once it is back, as first attempts; if
// the instance stops first, they go back to the queue.
func TestRefusedSpendsNoAttempt(t *testing.T) {
	ch := amqptest.Channel(t)
	start := func(t *testing.T) (*harness, string) {
		h, queue := consuming(t, ch, wire.RabbitMQTrigger{MaxRetries: 0, DeadLetterQueue: amqptest.Name("dlq")}, nil)
		h.fn.Kill()
		amqptest.Publish(t, ch, queue, messages(testfn.Message{ID: "a"}, testfn.Message{ID: "b"})...)
		// Refused, or held back once the prober saw the process gone.
		eventually.True(t, "both at the instance", func() bool { return amqptest.Depth(t, ch, queue) == 0 })
		return h, queue
	}

	t.Run("process back", func(t *testing.T) {
		h, queue := start(t)
		h.fn.Restart()
		h.waitResults(queue, "acked", 2)
		got := h.deliveries()
		for _, id := range []string{"a", "b"} {
			if d := got[id]; d.Count != 1 || http.Header(d.Headers).Get(wire.DeliveryCountHeader) != "1" {
				t.Errorf("%s: %d deliveries, the last counted %q; want 1, \"1\"", id, d.Count, http.Header(d.Headers).Get(wire.DeliveryCountHeader))
			}
		}
		if n := h.results(queue, "dead_lettered") + h.results(queue, "retried"); n != 0 {
			t.Errorf("%d refused messages spent an attempt", n)
		}
	})

	t.Run("instance stops", func(t *testing.T) {
		h, queue := start(t)
		h.cancel()
		select {
		case err := <-h.done:
			h.done <- err // for the cleanup
		case <-time.After(15 * time.Second):
			t.Fatal("queue-proxy did not stop")
		}
		if r := h.results(queue, "requeued"); r < 2 { // more if one came back before the cancel
			t.Errorf("requeued %d, want the 2 refused", r)
		}
		if n := h.results(queue, "dead_lettered") + h.results(queue, "retried"); n != 0 {
			t.Errorf("%d refused messages spent an attempt", n)
		}
		if d := amqptest.Depth(t, ch, queue); d != 2 {
			t.Errorf("queue depth after the stop = %d, want the 2 refused back", d)
		}
	})
}

// TestConsumeQuorum: a quorum trigger's retry and dead-letter queues are
// quorum queues too; a message retried through them comes back and is
// acked, and one that always fails is dead-lettered.
func TestConsumeQuorum(t *testing.T) {
	ch := amqptest.Channel(t)
	dlq := amqptest.Name("dlq")
	h, queue := consuming(t, ch, wire.RabbitMQTrigger{MaxRetries: 1, DeadLetterQueue: dlq, QueueType: v1alpha1.QueueQuorum}, nil)
	amqptest.Publish(t, ch, queue, messages(testfn.Message{ID: "flaky", Fail: 1}, testfn.Message{ID: "poison", Fail: -1})...)
	h.waitResults(queue, "acked", 1)
	h.waitResults(queue, "dead_lettered", 1)
	if d := h.deliveries()["flaky"]; d.Count != 2 {
		t.Errorf("flaky delivered %d times, want 2", d.Count)
	}
	for _, q := range append(consumer.RetryQueues(queue, h.srv.cfg.RetryBackoff, 1), dlq) {
		if typ := amqptest.QueueType(t, q); typ != "quorum" {
			t.Errorf("%s is a %s queue, want quorum as the trigger's", q, typ)
		}
	}
}
