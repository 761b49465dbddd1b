package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"

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
	delivered := func() map[string]testfn.Deliveries {
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
