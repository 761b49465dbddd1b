package queuedepth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
)

var brokerURL = amqptest.URL()

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestDepth reads the ready messages of real queues, and goes on reading
// after a passive declare of a missing queue has closed its channel.
func TestDepth(t *testing.T) {
	ch := amqptest.Channel(t)
	r := New(brokerURL, discard)
	t.Cleanup(func() { _ = r.Close() })
	for _, n := range []int{0, 1, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			waitDepth(t, r, declare(t, ch, n), int64(n))
		})
	}

	queue := declare(t, ch, 2)
	waitDepth(t, r, queue, 2)
	missing := amqptest.Name("missing")
	for range 2 * maxCalls { // more than the channels the reader keeps
		_, err := r.Depth(context.Background(), missing)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("queue %q not found", missing)) {
			t.Fatalf("Depth of a missing queue: %v, want an error naming %s as not found", err, missing)
		}
		if got, err := r.Depth(context.Background(), queue); err != nil || got != 2 {
			t.Fatalf("Depth after a missing queue = %d, %v; want 2", got, err)
		}
	}
}

// TestReconnect closes the reader's connection on the broker and sees it
// dial again and report.
func TestReconnect(t *testing.T) {
	ch := amqptest.Channel(t)
	r := New(brokerURL, discard)
	t.Cleanup(func() { _ = r.Close() })
	queue := declare(t, ch, 3)
	waitDepth(t, r, queue, 3)
	old := waitConnection(t, "")

	amqptest.Ctl(t, "close_connection", old, "sless queuedepth test")
	var got int64
	var err error
	if !eventually.Holds(eventually.Within, func() bool {
		got, err = r.Depth(context.Background(), queue)
		return err == nil && got == 3
	}) {
		t.Fatalf("Depth after the connection was closed = %d, %v; want 3", got, err)
	}
	waitConnection(t, old)
}

// TestBackoff dials a listener that is no broker: a failed dial waits its
// backoff before the next, and neither errors nor logs show the password.
func TestBackoff(t *testing.T) {
	var accepted atomic.Int32
	addr := listen(t, func(c net.Conn) {
		accepted.Add(1)
		c.Close()
	})
	var logs syncbuf.Buffer
	r := New("amqp://guest:s3cret-pw@"+addr+"/", slog.New(slog.NewTextHandler(&logs, nil)))
	r.minBackoff = maxBackoff
	t.Cleanup(func() { _ = r.Close() })

	for i, want := range []string{"dial broker amqp://guest:xxxxx@" + addr, "unreachable, next dial in", "unreachable, next dial in"} {
		_, err := r.Depth(context.Background(), "q")
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret-pw") {
			t.Fatalf("call %d: %v, want an error with %q and without the password", i, err, want)
		}
	}
	if got := accepted.Load(); got != 1 {
		t.Errorf("%d dials within the backoff, want 1", got)
	}
	if got := strings.Count(logs.String(), "broker unreachable"); got != 1 || strings.Contains(logs.String(), "s3cret-pw") {
		t.Errorf("logs %q: want one warning and no password", logs.String())
	}

	_, err := New("amqp://guest:s3cret-pw@127.0.0.1:port/", discard).Depth(context.Background(), "q")
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("Depth with a bad URL: %v, want an error without the password", err)
	}
}

// TestCancel gives up a call stuck in a dial to a listener that never
// answers, and closes the reader meanwhile.
func TestCancel(t *testing.T) {
	accepted := make(chan net.Conn, 1)
	addr := listen(t, func(c net.Conn) {
		t.Cleanup(func() { c.Close() })
		accepted <- c
	})
	r := New("amqp://guest:guest@"+addr+"/", discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Depth(ctx, "q")
		done <- err
	}()
	<-accepted // the call waits for the handshake, up to dialTimeout
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Depth after cancel: %v, want context.Canceled", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close during a dial: %v", err)
	}
	if _, err := r.Depth(context.Background(), "q"); !errors.Is(err, errClosed) {
		t.Errorf("Depth after Close: %v, want %v", err, errClosed)
	}
}

// TestAutoscaler scales a function on a real queue's depth through the
// autoscaler: ⌈ready / target⌉ above activation, and the last value while
// reads fail.
func TestAutoscaler(t *testing.T) {
	ch := amqptest.Channel(t)
	r := New(brokerURL, discard)
	t.Cleanup(func() { _ = r.Close() })
	queue := declare(t, ch, 7)
	waitDepth(t, r, queue, 7)

	for _, tc := range []struct {
		name               string
		max                int32
		target, activation int64
		want               int32
	}{
		{"ceil of ready over target", 10, 3, 0, 3},
		{"at activation", 10, 3, 7, 0},
		{"above activation", 10, 10, 6, 1},
		{"clamped to max", 2, 1, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, w := newAutoscaler(t, discard, NewBrokers(OneBroker(brokerURL), discard))
			a.SetFunction(time.Now(), function(tc.max, autoscaler.Queue{Name: queue, Target: tc.target, Activation: tc.activation}))
			a.Step(context.Background(), time.Now()) // the first step decides
			if got := w.replicas(); got != tc.want {
				t.Errorf("desired %d, want %d", got, tc.want)
			}
		})
	}

	t.Run("failed reads keep the last value", func(t *testing.T) {
		var logs syncbuf.Buffer
		failing := NewBrokers(OneBroker(brokerURL), discard)
		a, w := newAutoscaler(t, slog.New(slog.NewTextHandler(&logs, nil)), failing)
		a.SetFunction(time.Now(), function(10,
			autoscaler.Queue{Name: queue, Target: 3}, autoscaler.Queue{Name: amqptest.Name("missing"), Target: 1}))
		now := time.Now()
		a.Step(context.Background(), now)
		if got := w.replicas(); got != 3 {
			t.Fatalf("desired %d with one queue missing, want 3", got)
		}
		if err := failing.Close(); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			now = now.Add(time.Second)
			a.Step(context.Background(), now)
		}
		if got := w.replicas(); got != 3 {
			t.Errorf("desired %d while reads fail, want the last value 3", got)
		}
		if got := strings.Count(logs.String(), `msg="queue depth"`); got != 2 {
			t.Errorf("%d queue depth warnings for two failing queues over five steps, want 2:\n%s", got, &logs)
		}
	})
}

func function(max int32, queues ...autoscaler.Queue) autoscaler.Target {
	return autoscaler.Target{Namespace: "default", Name: "fn", Queues: queues, Spec: kpa.Spec{
		Max: max, Target: 1, StableWindow: 6 * time.Second}}
}

func newAutoscaler(t *testing.T, log *slog.Logger, queues autoscaler.QueueReader) (*autoscaler.Autoscaler, *recorder) {
	t.Helper()
	w := &recorder{last: -1}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), log, autoscaler.WithQueueReader(queues))
	if err != nil {
		t.Fatal(err)
	}
	return a, w
}

// recorder is the ReplicaWriter: it keeps the last replicas written, -1
// before the first.
type recorder struct {
	mu   sync.Mutex
	last int32
}

func (r *recorder) Scale(_ context.Context, _, _ string, replicas int32) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	had := r.last
	r.last = replicas
	return had, nil
}

func (r *recorder) replicas() int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// declare declares a queue that expires unused, deleted at cleanup, and
// publishes n messages to it.
func declare(t *testing.T, ch *amqp.Channel, n int) string {
	t.Helper()
	name := amqptest.Name("queue")
	if _, err := ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-expires": int32(60_000)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	for i := range n {
		msg := amqp.Publishing{Body: fmt.Appendf(nil, "message %d", i)}
		if err := ch.PublishWithContext(context.Background(), "", name, true, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// waitDepth polls until the reader reads want: publishing is asynchronous.
func waitDepth(t *testing.T, r *Reader, queue string, want int64) {
	t.Helper()
	var got int64
	var err error
	if !eventually.Holds(eventually.Within, func() bool {
		got, err = r.Depth(context.Background(), queue)
		return err == nil && got == want
	}) {
		t.Fatalf("Depth(%s) = %d, %v; want %d", queue, got, err, want)
	}
}

// waitConnection polls the broker until this process has exactly one
// reader connection, other than not, and returns its Erlang pid.
func waitConnection(t *testing.T, not string) string {
	t.Helper()
	mark := fmt.Sprintf(`{"connection_name","%s"}`, connectionName())
	var pids []string
	if !eventually.Holds(eventually.Within, func() bool {
		pids = amqptest.Connections(t, mark)
		return len(pids) == 1 && pids[0] != not
	}) {
		t.Fatalf("reader connections on the broker: %q, want one other than %q", pids, not)
	}
	return pids[0]
}

// listen serves connections on loopback with serve until the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(c)
		}
	}()
	return ln.Addr().String()
}
