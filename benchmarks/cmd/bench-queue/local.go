package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/benchmarks/devharness"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/invocation"
	"sless.dev/sless/local"
)

// platform is sless dev on the benchmark's functions, its invocation
// records in a ring the benchmark reads.
type platform struct {
	*devharness.InProcess
	records *invocation.Ring
}

// startPlatform runs sless dev on fns with the broker, and returns once
// every function satisfies until (devharness.Idle, devharness.Prepared).
func startPlatform(ctx context.Context, fns []devharness.Manifest, cacheDir string, noWake bool, until func(local.FunctionStatus) bool) (*platform, error) {
	records := invocation.NewRing(10_000)
	p, err := devharness.StartInProcess(ctx, "bench-queue",
		devharness.Options{Functions: fns, CacheDir: cacheDir, AllowExternalSources: true, Drain: 5 * time.Second},
		local.Options{Log: quiet, InstanceLog: quiet, AMQPURL: brokerURL, NoQueueWake: noWake, Records: records})
	if err != nil {
		return nil, err
	}
	if err := p.Wait(ctx, 5*time.Minute, until); err != nil {
		p.Stop()
		return nil, err
	}
	return &platform{InProcess: p, records: records}, nil
}

// wakeUps prints the time from the first message on the queue of a
// function at zero to its first successful invocation, with the parked
// consumer and with depth reads only, beside an HTTP cold start.
func wakeUps(ctx context.Context, conn *amqp.Connection, runs int, samples, cacheDir string) error {
	fmt.Printf("### From the first message at zero to its first successful invocation (ms, %d runs, sless dev, Go hello)\n\n", runs)
	fmt.Println("| wake-up | message p50 | message p95 | HTTP cold start p50 (same run) | p95 | message − HTTP p50 |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, mode := range []struct {
		name   string
		noWake bool
	}{{"parked consumer", false}, {"depth read each second", true}} {
		msgs, colds, err := wakeUpRuns(ctx, conn, runs, samples, cacheDir, mode.noWake)
		if err != nil {
			return fmt.Errorf("%s: %w", mode.name, err)
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", mode.name, hops.Ms(hops.Pct(msgs, 50)), hops.Ms(hops.Pct(msgs, 95)),
			hops.Ms(hops.Pct(colds, 50)), hops.Ms(hops.Pct(colds, 95)), hops.Ms(hops.Pct(msgs, 50)-hops.Pct(colds, 50)))
	}
	fmt.Println()
	return nil
}

func wakeUpRuns(ctx context.Context, conn *amqp.Connection, runs int, samples, cacheDir string, noWake bool) (msgs, colds []time.Duration, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	defer ch.Close()
	var fns []devharness.Manifest
	var queues []string
	for i := range runs {
		q := fmt.Sprintf("bench-wake-%d-%d", os.Getpid(), i)
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			return nil, nil, err
		}
		defer ch.QueueDelete(q, false, false, false)
		queues = append(queues, q)
		const scale = "{initial: 0, max: 1, window: 1h}"
		fns = append(fns,
			hello(fmt.Sprintf("wake-%02d", i), samples, scale, fmt.Sprintf("{name: q, rabbitmq: {queue: %s}}", q)),
			hello(fmt.Sprintf("http-%02d", i), samples, scale))
	}
	p, err := startPlatform(ctx, fns, cacheDir, noWake, devharness.Idle)
	if err != nil {
		return nil, nil, err
	}
	defer p.Stop()
	if err := ch.Confirm(false); err != nil {
		return nil, nil, err
	}
	for i, q := range queues {
		name := fmt.Sprintf("wake-%02d", i)
		sent := time.Now()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(`{}`)})
		if err != nil {
			return nil, nil, err
		}
		if _, err := dc.WaitContext(ctx); err != nil {
			return nil, nil, err
		}
		end, err := firstSuccess(ctx, p.records, name)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, end.Sub(sent))
		cold, err := httpColdStart(ctx, p.URL("default", fmt.Sprintf("http-%02d", i)))
		if err != nil {
			return nil, nil, err
		}
		colds = append(colds, cold)
	}
	return msgs, colds, nil
}

// firstSuccess waits for the first 2xx rabbitmq record of function name
// and returns when it was answered.
func firstSuccess(ctx context.Context, records *invocation.Ring, name string) (time.Time, error) {
	q := invocation.Query{Namespace: "default", Function: name, Trigger: "rabbitmq"}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		page, err := records.List(ctx, q)
		if err != nil {
			return time.Time{}, err
		}
		for _, r := range page.Invocations {
			if r.Status/100 == 2 {
				return r.Start.Add(r.Duration), nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("%s: no successful invocation within a minute", name)
}

func httpColdStart(ctx context.Context, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s: %d", url, resp.StatusCode)
	}
	return time.Since(start), nil
}

// cronLag prints how long after its scheduled time each pre-warmed fire
// left the activator, and how many found an instance warm. The functions
// scale to zero between fires.
func cronLag(ctx context.Context, fires int, samples, cacheDir string) error {
	const functions, every = 6, 12 * time.Second
	var fns []devharness.Manifest
	for i := range functions {
		fns = append(fns, hello(fmt.Sprintf("cron-%d", i), samples, "{initial: 0, max: 1, window: 6s, scaleToZeroGracePeriod: 0s}",
			fmt.Sprintf(`{name: tick, cron: {schedule: "@every %s", preWarm: 3s}}`, every)))
	}
	// Pre-warm scales them up 3 s before each fire: waiting for all six
	// idle at once could miss while slow builds finish.
	p, err := startPlatform(ctx, fns, cacheDir, false, devharness.Prepared)
	if err != nil {
		return err
	}
	defer p.Stop()
	var records []invocation.Record
	for deadline := time.Now().Add(time.Duration(fires/functions+2) * every); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		records = records[:0]
		for i := range functions {
			page, err := p.records.List(ctx, invocation.Query{Namespace: "default", Function: fmt.Sprintf("cron-%d", i), Trigger: "cron", Limit: 100})
			if err != nil {
				return err
			}
			records = append(records, page.Invocations...)
		}
		if len(records) >= fires {
			break
		}
	}
	var lags []time.Duration
	warm := 0
	for _, r := range records {
		// @every of whole seconds fires on whole seconds.
		left := r.Start.Add(r.QueueWait)
		lags = append(lags, left.Sub(left.Truncate(time.Second)))
		if !r.ColdStart && r.QueueWait == 0 {
			warm++
		}
	}
	if len(lags) == 0 {
		return fmt.Errorf("no cron fire recorded")
	}
	fmt.Printf("### Cron fires pre-warmed 3s ahead, functions at zero between fires (%d fires, %d functions @every %s)\n\n", len(lags), functions, every)
	fmt.Println("| scheduled → left the activator p50 ms | p99 | max | fires that found an instance warm |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| %s | %s | %s | %d of %d |\n\n", hops.Ms(hops.Pct(lags, 50)), hops.Ms(hops.Pct(lags, 99)), hops.Ms(hops.Pct(lags, 100)), warm, len(lags))
	return nil
}

// brokerPID finds the RabbitMQ server's Erlang VM.
func brokerPID() int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), "beam.smp") && strings.Contains(string(cmd), "rabbit") {
			return pid
		}
	}
	return 0
}

// cpuMeter is the CPU time of the broker, the function process and this
// process (the client or the queue-proxy) over one run.
type cpuMeter struct {
	pids  [3]int
	start [3]time.Duration
}

func newCPUMeter(fnPID int) *cpuMeter {
	m := &cpuMeter{pids: [3]int{brokerPID(), fnPID, os.Getpid()}}
	for i, p := range m.pids {
		m.start[i], _ = hops.CPUTime(p)
	}
	return m
}

// perMessage returns the CPU µs per message of the broker, the function
// and this process since the meter was made.
func (m *cpuMeter) perMessage(n int) string {
	var parts [3]string
	for i, p := range m.pids {
		now, _ := hops.CPUTime(p)
		parts[i] = strconv.FormatFloat(float64((now-m.start[i]).Microseconds())/float64(n), 'f', 0, 64)
	}
	return strings.Join(parts[:], " / ")
}
