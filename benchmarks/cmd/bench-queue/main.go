// Command bench-queue measures the RabbitMQ and cron triggers on the real
// broker at 127.0.0.1:5672, each against a floor measured in the same run:
//
//   - Messages per second through one queue-proxy in front of the Go
//     hello at prefetch 1, 10 and 100, against a bare amqp091
//     consume-and-ack loop on the same queue and direct HTTP calls to the
//     same runtime process at the same concurrency.
//
//   - From the first message on the queue of a function at zero (sless
//     dev) to its first successful invocation, with the parked consumer
//     and with depth reads only, against an HTTP cold start of the same
//     function.
//
//   - Cron: how long after its scheduled time a pre-warmed fire leaves
//     the activator, and whether it found an instance warm.
//
//     go run ./benchmarks/cmd/bench-queue [-messages 20000] [-runs 10] [-fires 30]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/devharness"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/queueproxy"
)

const brokerURL = "amqp://guest:guest@127.0.0.1:5672/"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func main() {
	var (
		messages = flag.Int("messages", 20000, "messages per throughput run")
		runs     = flag.Int("runs", 10, "wake-ups from zero per mode")
		fires    = flag.Int("fires", 30, "cron fires")
		samples  = flag.String("samples", "config/samples/functions", "the directory holding hello-go")
		cacheDir = flag.String("cache-dir", "bin/bench-cache", "builds kept between runs")
		only     = flag.String("only", "", "run one part: throughput, wake or cron")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *only, *messages, *runs, *fires, *samples, *cacheDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-queue:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, only string, messages, runs, fires int, samples, cacheDir string) error {
	samples, err := filepath.Abs(samples)
	if err != nil {
		return err
	}
	if cacheDir, err = filepath.Abs(cacheDir); err != nil {
		return err
	}
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		return fmt.Errorf("RabbitMQ at %s: %w", brokerURL, err)
	}
	defer conn.Close()
	parts := []struct {
		name string
		run  func() error
	}{
		{"throughput", func() error { return throughput(ctx, conn, messages, samples, cacheDir) }},
		{"wake", func() error { return wakeUps(ctx, conn, runs, samples, cacheDir) }},
		{"cron", func() error { return cronLag(ctx, fires, samples, cacheDir) }},
	}
	for _, p := range parts {
		if only != "" && only != p.name {
			continue
		}
		if err := p.run(); err != nil {
			return err
		}
	}
	return nil
}

// throughput prints messages per second through one instance at each
// prefetch, and the two floors.
func throughput(ctx context.Context, conn *amqp.Connection, n int, samples, cacheDir string) error {
	proc, err := hops.PrepareHello(ctx, v1alpha1.RuntimeGo, samples, cacheDir)
	if err != nil {
		return err
	}
	fn, addr, err := hops.StartRuntime(proc)
	if err != nil {
		return err
	}
	defer func() { _ = fn.Process.Kill(); _ = fn.Wait() }()
	if err := hops.WaitOK(ctx, "http://"+addr+"/healthz", nil, time.Millisecond, time.Minute); err != nil {
		return err
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	fmt.Printf("### Messages per second through one instance of the Go hello (%d messages a run)\n\n", n)
	fmt.Println("Rates in messages/s; CPU in µs per message of the broker / the function process / the client or queue-proxy.")
	fmt.Println("Both floors use the whole machine: the composed floor, 1/(1/bare + 1/direct), is the rate of doing both one after the other.")
	fmt.Println()
	fmt.Println("| prefetch | bare amqp091 consume+ack | CPU | direct HTTP, same concurrency | CPU | composed floor | through the queue-proxy | CPU | ratio to the lower floor | ratio to the composed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, prefetch := range []int{1, 10, 100} {
		var bare, viaQP float64
		var bareCPU, qpCPU string
		err := withQueue(ctx, conn, n, func(name string) (err error) {
			m := newCPUMeter(fn.Process.Pid)
			bare, err = bareConsume(conn, name, n, prefetch)
			bareCPU = m.perMessage(n)
			return err
		})
		if err != nil {
			return fmt.Errorf("bare consume: %w", err)
		}
		m := newCPUMeter(fn.Process.Pid)
		direct, err := directHTTP(port, n, prefetch)
		if err != nil {
			return fmt.Errorf("direct HTTP: %w", err)
		}
		directCPU := m.perMessage(n)
		err = withQueue(ctx, conn, n, func(name string) (err error) {
			m := newCPUMeter(fn.Process.Pid)
			viaQP, err = queueProxy(ctx, name, n, prefetch, port)
			qpCPU = m.perMessage(n)
			return err
		})
		if err != nil {
			return fmt.Errorf("queue-proxy: %w", err)
		}
		composed := 1 / (1/bare + 1/direct)
		fmt.Printf("| %d | %.0f | %s | %.0f | %s | %.0f | %.0f | %s | %.2f | %.2f |\n", prefetch, bare, bareCPU, direct, directCPU,
			composed, viaQP, qpCPU, viaQP/min(bare, direct), viaQP/composed)
	}
	fmt.Println()
	return nil
}

// withQueue runs f on a fresh queue holding n messages, deleted after.
func withQueue(ctx context.Context, conn *amqp.Connection, n int, f func(name string) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	name := fmt.Sprintf("bench-queue-%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		return err
	}
	defer ch.QueueDelete(name, false, false, false)
	if err := publish(ctx, ch, name, n); err != nil {
		return err
	}
	return f(name)
}

// publish sends n small messages to queue and waits for their confirms.
func publish(ctx context.Context, ch *amqp.Channel, queue string, n int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	body := []byte(`{"name":"queue"}`)
	for i := range n {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: strconv.Itoa(i), ContentType: "application/json", Body: body}); err != nil {
			return err
		}
	}
	for range n {
		if c := <-confirms; !c.Ack {
			return fmt.Errorf("publish %d nacked", c.DeliveryTag)
		}
	}
	return nil
}

// bareConsume is the broker's floor: one consumer acking each delivery as
// it comes, at the prefetch.
func bareConsume(conn *amqp.Connection, name string, n, prefetch int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	start := time.Now()
	ds, err := ch.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		d := <-ds
		if err := d.Ack(false); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// directHTTP is the function's floor: n POSTs to the runtime process from
// concurrency clients, with the library the queue-proxy uses.
func directHTTP(port, n, concurrency int) (float64, error) {
	c := &fasthttp.HostClient{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxConns: concurrency, MaxIdemponentCallAttempts: 1}
	var left atomic.Int64
	left.Store(int64(n))
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for left.Add(-1) >= 0 {
				req.Header.SetMethod(fasthttp.MethodPost)
				req.SetRequestURI("/")
				req.Header.SetHost("localhost")
				req.Header.SetContentType("application/json")
				req.SetBodyString(`{"name":"queue"}`)
				if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					failed.Store(fmt.Errorf("%v %d", err, resp.StatusCode()))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// queueProxy runs a real queue-proxy in front of the runtime process,
// consuming a queue of n messages at the prefetch, and measures until all
// are acked.
func queueProxy(ctx context.Context, name string, n, prefetch, port int) (float64, error) {
	cfg := queueproxy.Config{Namespace: "bench", Function: "hello", UserPort: port, Concurrency: prefetch,
		QueueDepth: 10 * prefetch, Timeout: time.Minute, MaxBodyBytes: 1 << 20, DrainTimeout: time.Second,
		ReadTimeout: 10 * time.Second, RetryBackoff: time.Second,
		RabbitMQ: []queueproxy.RabbitMQ{{URL: brokerURL, RabbitMQTrigger: wire.RabbitMQTrigger{
			Name: "bench", Queue: name, URLEnv: "-", Prefetch: prefetch, MaxRetries: 3}}}}
	srv, err := queueproxy.New(cfg, quiet)
	if err != nil {
		return 0, err
	}
	serving, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	qctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- srv.Run(qctx, serving, admin) }()
	defer func() { cancel(); <-done }()
	for acked(srv) < n {
		if time.Since(start) > 5*time.Minute {
			return 0, fmt.Errorf("%d of %d acked in 5 minutes", acked(srv), n)
		}
		time.Sleep(20 * time.Millisecond) // a Gather reads /proc: not often
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// acked reads sless_queue_messages_total{result="acked"} of srv.
func acked(srv *queueproxy.Server) int {
	fams, _ := srv.Gatherer().Gather()
	for _, f := range fams {
		if f.GetName() != "sless_queue_messages_total" {
			continue
		}
		for _, m := range f.Metric {
			if slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == "result" && l.GetValue() == "acked" }) {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// hello is the Go hello sample as the function name, with scale and
// triggers.
func hello(name, samples, scale string, triggers ...string) devharness.Manifest {
	return devharness.Manifest{Name: name, Runtime: v1alpha1.RuntimeGo, Source: filepath.Join(samples, "hello-go"),
		Handler: "Handle", Scale: scale, Triggers: triggers}
}
