package activator

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/runs"
)

// publishingPolicy is runsPolicy, answers published to done and failed.
func publishingPolicy(done, failed string) runs.Policy {
	p := runsPolicy
	p.OnSuccess, p.OnFailure = runs.Target{Queue: done}, runs.Target{Queue: failed}
	return p
}

// awaitPublished waits for a run's answer to be published.
func awaitPublished(t *testing.T, base string, id runs.ID) runs.Run {
	t.Helper()
	r := awaitRun(t, base, id)
	eventually.True(t, "run "+string(id)+"'s answer published", func() bool {
		r = awaitRun(t, base, id)
		return r.PublishedAt != nil
	})
	return r
}

// The answers of runs whose function names a queue for their end are
// published there once each: the answer's body and content type, the
// run's id as the message id, what ended the run in the headers. A
// connection the broker closes is dialed again.
func TestRunAnswersPublished(t *testing.T) {
	ch := amqptest.Channel(t)
	done, failed := amqptest.Name("done"), amqptest.Name("failed")
	amqptest.DeleteAtCleanup(t, ch, done, failed) // the activator declares them
	a, base := startRunsWith(t, runs.NewMemory(), RunsConfig{Interval: 20 * time.Millisecond, BrokerURL: amqptest.URL()})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second, Runs: publishingPolicy(done, failed)})

	ok := submitRun(t, base, "/fn/ns/hello/echo?status=201", "hello")
	bad := submitRun(t, base, "/fn/ns/hello/echo?status=404", "bad")
	for _, tc := range []struct {
		id           runs.ID
		queue, state string
		status       int32
		err          any
	}{
		{ok, done, "succeeded", 201, nil},
		{bad, failed, "failed", 404, "the function answered 404"},
	} {
		r := awaitPublished(t, base, tc.id)
		if r.PublishTo != tc.queue || string(r.State) != tc.state {
			t.Errorf("run %s: %+v, want %s and published to %s", tc.id, r, tc.state, tc.queue)
		}
		_, answer := call(t, http.MethodGet, base+"/runs/"+string(tc.id)+"/result", "")
		d := amqptest.Take(t, ch, tc.queue)
		h := d.Headers
		if string(d.Body) != string(answer) || d.MessageId != string(tc.id) || d.ContentType != "application/json" ||
			d.DeliveryMode != amqp.Persistent || !d.Timestamp.Equal(r.CompletedAt.Truncate(time.Second)) {
			t.Errorf("run %s: message %s %q %q %d %v, want its answer %q", tc.id, d.MessageId, d.Body, d.ContentType, d.DeliveryMode, d.Timestamp, answer)
		}
		if h[runs.MessageRunHeader] != string(tc.id) || h[runs.MessageFunctionHeader] != "ns/hello" || h[runs.MessageStateHeader] != tc.state ||
			h[runs.MessageStatusHeader] != tc.status || h[runs.MessageErrorHeader] != tc.err {
			t.Errorf("run %s: message headers %v", tc.id, h)
		}
	}
	if n := amqptest.Depth(t, ch, done) + amqptest.Depth(t, ch, failed); n != 0 {
		t.Errorf("%d messages more than the answers", n)
	}

	if n := amqptest.CloseConnections(t, "sless activator run answers"); n != 1 {
		t.Fatalf("closed %d connections of the publisher, want 1", n)
	}
	again := submitRun(t, base, "/fn/ns/hello/echo", "again")
	awaitPublished(t, base, again)
	if d := amqptest.Take(t, ch, done); d.MessageId != string(again) {
		t.Errorf("after the broker closed the connection, message %s, want run %s's", d.MessageId, again)
	}
	if n := testutil.ToFloat64(a.metrics.runs.published); n != 3 {
		t.Errorf("%v answers counted published, want 3", n)
	}
}

// An answer its activator cannot publish (its broker cannot be reached)
// waits, kept with its run, for one that can: another activator on the
// same store publishes it.
func TestRunAnswersWaitForABroker(t *testing.T) {
	ch := amqptest.Channel(t)
	done := amqptest.Name("done")
	amqptest.DeleteAtCleanup(t, ch, done)
	store := runs.NewMemory()
	a, base := startRunsWith(t, store, RunsConfig{Interval: 20 * time.Millisecond, BrokerURL: "amqp://guest:guest@" + closedAddr(t) + "/"})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second, Runs: publishingPolicy(done, "")})

	id := submitRun(t, base, "/fn/ns/hello/echo", "hello")
	if r := awaitRun(t, base, id); r.State != runs.Succeeded || r.PublishTo != done || r.PublishedAt != nil {
		t.Fatalf("run %+v, want it succeeded, its answer waiting for %s", r, done)
	}
	b, _ := startRunsWith(t, store, RunsConfig{Interval: 20 * time.Millisecond, BrokerURL: amqptest.URL()})
	awaitPublished(t, base, id)
	if d := amqptest.Take(t, ch, done); d.MessageId != string(id) {
		t.Errorf("message %s, want run %s's", d.MessageId, id)
	}
	if na, nb := testutil.ToFloat64(a.metrics.runs.published), testutil.ToFloat64(b.metrics.runs.published); na != 0 || nb != 1 {
		t.Errorf("published %v by the activator without a broker, %v by the one with, want 0 and 1", na, nb)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
