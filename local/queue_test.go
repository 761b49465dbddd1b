package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy/consumer"
)

// consumerFn is a Python function that appends the id of every message it
// gets to a file of its process in $OUT, so that the test counts what the
// function saw across instances.
const consumerFn = `import os
out = open(os.path.join(os.environ["OUT"], str(os.getpid())), "a", buffering=1)

def handle(event):
    out.write(event["headers"]["sless-message-id"] + "\n")
    return "ok"
`

// seen counts the messages the function processed, by id.
func seen(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for id := range strings.Lines(string(b)) {
			if strings.HasSuffix(id, "\n") { // a line being written is not whole yet
				out[strings.TrimSuffix(id, "\n")]++
			}
		}
	}
	return out
}

// TestQueueFromZero: 10,000 messages published to a function at zero wake
// it, it scales out, every message is processed at least once and acked,
// the queue ends empty, and the function returns to zero.
func TestQueueFromZero(t *testing.T) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "local")
	out := t.TempDir()
	spec := fmt.Sprintf(`  concurrency: 10
  scale: {initial: 0, max: 4, window: 6s, scaleToZeroGracePeriod: 0s}
  env: [{name: OUT, value: %q}]
  triggers:
    - {name: orders, rabbitmq: {queue: %s, prefetch: 10, targetQueueLength: 500}}
`, out, queue)
	p := startPlatformCode(t, consumerFn, manifest("consumer", spec), func(o *Options) { o.AMQPURL = amqptest.URL() })
	p.waitFor("the function idle, its queue watched", 30*time.Second, func() bool {
		st := p.status("consumer")
		return st.State == "idle" && len(st.Triggers) == 1 && st.Triggers[0].State == "waiting"
	})

	const n = 10_000
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = []byte(`{"order":` + fmt.Sprint(i) + `}`)
	}
	amqptest.Publish(t, ch, queue, bodies...)
	peak := 0
	p.waitFor("every message processed", 3*time.Minute, func() bool {
		peak = max(peak, p.status("consumer").Ready)
		return len(seen(t, out)) == n
	})
	if peak < 2 {
		t.Errorf("at most %d instance ready while %d messages waited, want a scale-out", peak, n)
	}
	if st := p.status("consumer"); st.Triggers[0].State != "consuming" {
		t.Errorf("trigger %+v while instances run, want consuming", st.Triggers[0])
	}
	p.waitFor("back to zero", time.Minute, func() bool {
		st := p.status("consumer")
		return st.Desired == 0 && st.Ready == 0 && st.Starting == 0
	})
	if d := amqptest.Depth(t, ch, queue); d != 0 {
		t.Errorf("%d messages left in the queue, want 0", d)
	}
	dups := 0
	for _, c := range seen(t, out) {
		dups += c - 1
	}
	page, err := p.records.List(context.Background(), invocation.Query{Namespace: "default", Function: "consumer", Trigger: "rabbitmq", Limit: 1})
	if err != nil || len(page.Invocations) != 1 || page.Invocations[0].TriggerName != "orders" || page.Invocations[0].Status != 200 {
		t.Errorf("records of the messages: %+v, %v; want rabbitmq records of orders", page.Invocations, err)
	}
	t.Logf("%d messages, %d duplicates, peak %d instances", n, dups, peak)
}

// TestQueueMissing: a trigger whose queue does not exist says so in the
// function's status, and its HTTP trigger keeps serving.
func TestQueueMissing(t *testing.T) {
	amqptest.Channel(t)
	spec := `  scale: {initial: 1, window: 6s}
  triggers:
    - {name: web, http: {}}
    - {name: orders, rabbitmq: {queue: sless-test-no-such-queue}}
`
	p := startPlatformWith(t, manifest("missing", spec), func(o *Options) { o.AMQPURL = amqptest.URL() })
	p.waitFor("the trigger failing", 30*time.Second, func() bool {
		st := p.status("missing")
		return len(st.Triggers) == 2 && st.Triggers[1].State == "failing" &&
			strings.Contains(st.Triggers[1].Error, `queue "sless-test-no-such-queue" not found`)
	})
	if code, _, err := p.invoke("missing", ""); code != 200 {
		t.Errorf("HTTP beside a failing queue trigger: %d %v", code, err)
	}
}

// crashFn exits its process on the message "poison", after a pause that
// keeps the others in flight with it, and writes the id of every other
// message it processed to a file of its process in $OUT.
const crashFn = `import os, time
out = open(os.path.join(os.environ["OUT"], str(os.getpid())), "a", buffering=1)

def handle(event):
    if event["body"] == "poison":
        time.sleep(0.2)
        os._exit(3)
    time.sleep(0.5)
    out.write(event["headers"]["sless-message-id"] + "\n")
    return "ok"
`

// TestQueueCrashSparesOthers: in sless dev, where a crashed runtime takes
// its instance (queue-proxy included) down, a message that kills its
// runtime spends only its own attempts: the four processed with it are
// processed, and the dead-letter queue holds the poison alone.
func TestQueueCrashSparesOthers(t *testing.T) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "local")
	dlq := amqptest.Queue(t, ch, "dlq")
	const backoff = 50 * time.Millisecond
	amqptest.DeleteAtCleanup(t, ch, consumer.RetryQueues(queue, backoff, 1)...)
	out := t.TempDir()
	spec := fmt.Sprintf(`  scale: {initial: 1, min: 1, max: 1}
  env: [{name: OUT, value: %q}]
  triggers:
    - {name: orders, rabbitmq: {queue: %s, prefetch: 5, maxRetries: 1, deadLetterQueue: %s}}
`, out, queue, dlq)
	p := startPlatformCode(t, crashFn, manifest("crasher", spec), func(o *Options) {
		o.AMQPURL, o.RetryBackoff = amqptest.URL(), backoff
	})
	p.waitFor("consuming", 30*time.Second, func() bool {
		st := p.status("crasher")
		return len(st.Triggers) == 1 && st.Triggers[0].State == "consuming"
	})
	amqptest.Publish(t, ch, queue, []byte("poison"), []byte("1"), []byte("2"), []byte("3"), []byte("4"))
	p.waitFor("the healthy messages processed and the poison dead-lettered", time.Minute, func() bool {
		return len(seen(t, out)) == 4 && amqptest.Depth(t, ch, dlq) == 1
	})
	msg := amqptest.Take(t, ch, dlq)
	if string(msg.Body) != "poison" || msg.Headers[consumer.AttemptsHeader] != int32(2) || msg.Headers[consumer.StatusHeader] != int32(502) {
		t.Errorf("dead-lettered %q with %v, want the poison after 2 attempts, status 502", msg.Body, msg.Headers)
	}
	if got := seen(t, out); got["0"] != 0 {
		t.Errorf("the poison was processed: %v", got)
	}
	if d := amqptest.Depth(t, ch, dlq); d != 0 {
		t.Errorf("%d more messages dead-lettered, want the poison alone", d)
	}
}
