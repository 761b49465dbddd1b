package activator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/queueproxy/queueproxytest"
)

// TestQueueProxyRecords: a queue-proxy sends the records of the messages
// it consumes to the activator's admin API, which keeps them for a ready
// instance of their function only, and for rabbitmq records only. A batch
// sent before the activator knows the instance is sent again.
func TestQueueProxyRecords(t *testing.T) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "records")
	ring := invocation.NewRing(100)
	a, err := New(Config{}, &countingPoker{}, ring, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFunction(RouteSpec{Namespace: "test", Name: "fn", Timeout: 10 * time.Second})
	a.SetFunction(RouteSpec{Namespace: "test", Name: "elsewhere", Timeout: 10 * time.Second})
	a.SetEndpoints("test", "elsewhere", []string{"10.0.0.1:8012"})
	srv := &Server{Activator: a, DrainTimeout: time.Second, Log: quiet, Admin: AdminServer{
		Activator: a, Registry: prometheus.NewRegistry(), Records: ring, Token: "s3cret", AcceptRecords: true, Log: quiet}}
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	t.Cleanup(func() { cancel(); <-done })
	adminURL := "http://" + admin.Addr().String()
	// What the queue-proxy sends is counted on its way to the activator.
	target, _ := url.Parse(adminURL)
	var posts atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(counting.Close)

	in := queueproxytest.Start(t, func(c *queueproxy.Config) {
		c.RabbitMQ = []queueproxy.RabbitMQ{{URL: amqptest.URL(), RabbitMQTrigger: wire.RabbitMQTrigger{
			Name: "orders", Queue: queue, URLEnv: "X", Prefetch: 1}}}
		c.RecordsURL = counting.URL
	})
	body, _ := json.Marshal(testfn.Message{ID: "m1"})
	amqptest.Publish(t, ch, queue, body)
	eventually.True(t, "a batch refused: the activator does not know the instance yet", func() bool { return posts.Load() >= 1 })
	a.SetEndpoints("test", "fn", []string{in.Addr})
	var page invocation.Page
	eventually.True(t, "the message's record kept", func() bool {
		page, _ = ring.List(context.Background(), invocation.Query{Namespace: "test", Function: "fn", Trigger: "rabbitmq"})
		return len(page.Invocations) == 1
	})
	if r := page.Invocations[0]; r.Status != 200 || r.TriggerName != "orders" || r.RequestID != "0" {
		t.Errorf("record %+v, want a 200 of trigger orders for message 0", r)
	}

	post := func(records string) (int, string) {
		resp, err := http.Post(adminURL+wire.RecordsPath, "application/json", strings.NewReader(records))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		return resp.StatusCode, answer.Error
	}
	for _, tt := range []struct {
		name, records string
		code          int
		want          string
	}{
		{"not an instance of it", `[{"namespace":"test","function":"elsewhere","trigger":"rabbitmq","status":200}]`, 403, "not a ready instance"},
		{"not a queue record", `[{"namespace":"test","function":"fn","trigger":"http","status":200}]`, 400, "rabbitmq records only"},
		{"unknown function", `[{"namespace":"test","function":"nobody","trigger":"rabbitmq","status":200}]`, 400, "unknown function"},
		{"not JSON", `{`, 400, "not a JSON array"},
		{"too many", "[" + strings.TrimSuffix(strings.Repeat(`{"namespace":"test","function":"fn","trigger":"rabbitmq"},`, MaxRecordBatch+1), ",") + "]", 413, fmt.Sprint(MaxRecordBatch)},
	} {
		if code, msg := post(tt.records); code != tt.code || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: %d %q, want %d %q", tt.name, code, msg, tt.code, tt.want)
		}
	}
	page, _ = ring.List(context.Background(), invocation.Query{Namespace: "test", Function: "fn"})
	if len(page.Invocations) != 1 {
		t.Errorf("%d records after the refused batches, want the 1 kept", len(page.Invocations))
	}
}

// An answer cut mid-body is recorded as the failure that cut it, not as
// the 200 its head said: by the function's maximum duration or idle
// timeout a 504, by the client leaving a 499, each with its cause. The
// timeout bounds the answer's start alone: a stream goes on past it.
func TestCutAnswersRecorded(t *testing.T) {
	ring := invocation.NewRing(100)
	a, err := New(Config{}, &countingPoker{}, ring, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	in := queueproxytest.Start(t)
	for _, fn := range []RouteSpec{
		{Name: "short", Timeout: 2 * time.Second},
		{Name: "long", Timeout: time.Minute},
		{Name: "idle", Timeout: time.Minute, IdleTimeout: time.Second},
		{Name: "stretch", Timeout: time.Second, MaxDuration: 3 * time.Second},
	} {
		fn.Namespace, fn.HTTP = "test", true
		a.SetFunction(fn)
		a.SetEndpoints("test", fn.Name, []string{in.Addr})
	}
	base := serveActivator(t, a)
	record := func(fn string) invocation.Record {
		var page invocation.Page
		eventually.True(t, "the record of "+fn, func() bool {
			page, _ = ring.List(context.Background(), invocation.Query{Namespace: "test", Function: fn})
			return len(page.Invocations) == 1
		})
		return page.Invocations[0]
	}

	// /drip sends 100 KiB, then holds the rest past every bound.
	for _, tt := range []struct {
		fn, cause string
		atLeast   time.Duration // the stream's life: past the timeout, for stretch
	}{
		{"short", forward.ErrMaxDuration.Error(), 0},
		{"idle", forward.ErrIdleTimeout.Error(), 0},
		{"stretch", forward.ErrMaxDuration.Error(), 2500 * time.Millisecond},
	} {
		start := time.Now()
		resp, err := client.Get(base + "/fn/test/" + tt.fn + "/drip?id=cut-" + tt.fn)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil || len(body) != 100<<10 {
			t.Errorf("%s: %d, %d bytes, %v: want the head's 200, then the answer cut", tt.fn, resp.StatusCode, len(body), err)
		}
		if r := record(tt.fn); r.Status != 504 || r.Error != "answer cut: "+tt.cause || r.Duration < tt.atLeast {
			t.Errorf("record of %s: %d %q after %v, want 504 answer cut: %s, after %v at least", tt.fn, r.Status, r.Error, r.Duration, tt.cause, tt.atLeast)
		}
		if d := time.Since(start); d < tt.atLeast {
			t.Errorf("%s: cut after %v, want %v at least", tt.fn, d, tt.atLeast)
		}
	}

	resp, err := client.Get(base + "/fn/test/long/drip?id=cut-long")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client leaves mid-body
	if r := record("long"); r.Status != 499 || r.Error != "answer cut: client closed the connection" {
		t.Errorf("record of the stream its client left: %d %q, want 499 answer cut: client closed the connection", r.Status, r.Error)
	}
}
