// Command bench-coldstart measures cold starts and warm throughput of the
// local platform, per runtime, on the hello samples. A cold start is one
// request to a function at zero instances, from sent to answered; it is
// split into the instance's start (process started to first healthy
// answer, as the supervisor measures it) and the rest, the platform's own
// share: the poke, the decision, starting the queue-proxy, the readiness
// probe's granularity and the forward. The same runtime process started
// directly, with no platform, is measured in the same run as the
// baseline. Warm throughput is closed-loop load through the activator and
// the queue-proxy, against the same function process loaded directly.
//
//	go run ./benchmarks/cmd/bench-coldstart [-runs 20] [-duration 5s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/devharness"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/load"
	"sless.dev/sless/local"
)

var runtimeNames = []v1alpha1.Runtime{v1alpha1.RuntimeGo, v1alpha1.RuntimePython, v1alpha1.RuntimeNode}

func main() {
	var (
		runs     = flag.Int("runs", 20, "cold starts per runtime")
		duration = flag.Duration("duration", 5*time.Second, "measured time of each warm throughput run")
		samples  = flag.String("samples", "config/samples/functions", "the directory holding hello-go, hello-python and hello-node")
		cacheDir = flag.String("cache-dir", "bin/bench-cache", "builds kept between runs (Go cold starts are measured with the binary cached)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *runs, *duration, *samples, *cacheDir); err != nil {
		fmt.Fprintln(os.Stderr, "bench-coldstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int, duration time.Duration, samples, cacheDir string) error {
	samples, err := filepath.Abs(samples)
	if err != nil {
		return err
	}
	if cacheDir, err = filepath.Abs(cacheDir); err != nil {
		return err
	}
	p, err := devharness.StartInProcess(ctx, "bench-coldstart", devharness.Options{Functions: functions(samples, runs),
		CacheDir: cacheDir, AllowExternalSources: true, Drain: 5 * time.Second}, local.Options{}) // the manifests point at the samples
	if err != nil {
		return err
	}
	defer p.Stop()
	fmt.Fprintln(os.Stderr, "preparing functions...")
	if err := p.Wait(ctx, 10*time.Minute, devharness.Idle); err != nil {
		return err
	}

	fmt.Println("### Cold start from zero, per runtime (ms)")
	fmt.Printf("%d runs each; instance start = process start to first healthy answer; platform = cold start − instance start; direct = the runtime process alone, started and polled every 0.2 ms.\n\n", runs)
	fmt.Println("| runtime | cold start p50 | p95 | instance start p50 | platform p50 | platform p95 | direct start p50 | direct p95 |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, rt := range runtimeNames {
		var total, inst, platform []time.Duration
		for i := 1; i <= runs; i++ {
			name := fmt.Sprintf("cold-%s-%02d", rt, i)
			t, err := invoke(ctx, p.URL("default", name))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			st, _ := p.Function("default", name)
			startup := time.Duration(st.LastStartupMs * float64(time.Millisecond))
			total, inst, platform = append(total, t), append(inst, startup), append(platform, t-startup)
		}
		direct, err := directStarts(ctx, rt, samples, cacheDir, runs)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", rt, hops.Ms(hops.Pct(total, 50)), hops.Ms(hops.Pct(total, 95)),
			hops.Ms(hops.Pct(inst, 50)), hops.Ms(hops.Pct(platform, 50)), hops.Ms(hops.Pct(platform, 95)), hops.Ms(hops.Pct(direct, 50)), hops.Ms(hops.Pct(direct, 95)))
	}

	fmt.Println()
	fmt.Println("### Warm hello throughput, per runtime (closed loop, 16 connections)")
	fmt.Println()
	fmt.Println("| runtime | direct rps | through sless rps | ratio | direct p50 ms | sless p50 ms |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, rt := range runtimeNames {
		warm := "warm-" + string(rt)
		if _, err := invoke(ctx, p.URL("default", warm)); err != nil {
			return err
		}
		viaSless, err := warmLoad(ctx, p.URL("default", warm), duration)
		if err != nil {
			return err
		}
		direct, err := directLoad(ctx, rt, samples, cacheDir, duration)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2f | %s | %s |\n", rt, direct.Throughput, viaSless.Throughput,
			viaSless.Throughput/direct.Throughput, hops.Ms(direct.Latency.P50), hops.Ms(viaSless.Latency.P50))
	}
	return nil
}

// functions are runs cold functions and one warm function per runtime,
// each at zero instances with a window long enough to stay up.
func functions(samples string, runs int) []devharness.Manifest {
	var fns []devharness.Manifest
	fn := func(name string, rt v1alpha1.Runtime) {
		fns = append(fns, devharness.Manifest{Name: name, Runtime: rt, Source: filepath.Join(samples, "hello-"+string(rt)),
			Scale: "{initial: 0, max: 1, window: 1h}"})
	}
	for _, rt := range runtimeNames {
		for i := 1; i <= runs; i++ {
			fn(fmt.Sprintf("cold-%s-%02d", rt, i), rt)
		}
		fn("warm-"+string(rt), rt)
	}
	return fns
}

var client = &http.Client{Timeout: time.Minute}

// invoke sends one GET and returns how long the answer took.
func invoke(ctx context.Context, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 || !json.Valid(body) {
		return 0, fmt.Errorf("%s: %d %s", url, resp.StatusCode, body)
	}
	return took, nil
}

// directStarts starts the runtime process alone runs times and measures
// each start to its first healthy answer.
func directStarts(ctx context.Context, rt v1alpha1.Runtime, samples, cacheDir string, runs int) ([]time.Duration, error) {
	proc, err := hops.PrepareHello(ctx, rt, samples, cacheDir)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for range runs {
		begin := time.Now()
		cmd, addr, err := hops.StartRuntime(proc)
		if err != nil {
			return nil, err
		}
		for {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Since(begin) > time.Minute {
				_ = cmd.Process.Kill()
				return nil, fmt.Errorf("direct %s: not healthy within a minute", rt)
			}
			time.Sleep(200 * time.Microsecond)
		}
		out = append(out, time.Since(begin))
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return out, nil
}

func warmLoad(ctx context.Context, url string, duration time.Duration) (load.Result, error) {
	res, err := load.Run(ctx, load.Options{URL: url, Connections: 16, Duration: duration, Warmup: time.Second})
	if err == nil && (res.Errors > 0 || res.Codes[200] != res.Requests) {
		err = fmt.Errorf("%s: %d errors, codes %v", url, res.Errors, res.Codes)
	}
	return res, err
}

func directLoad(ctx context.Context, rt v1alpha1.Runtime, samples, cacheDir string, duration time.Duration) (load.Result, error) {
	proc, err := hops.PrepareHello(ctx, rt, samples, cacheDir)
	if err != nil {
		return load.Result{}, err
	}
	cmd, addr, err := hops.StartRuntime(proc)
	if err != nil {
		return load.Result{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := hops.WaitOK(ctx, "http://"+addr+"/healthz", nil, time.Millisecond, time.Minute); err != nil {
		return load.Result{}, fmt.Errorf("direct %s: %w", rt, err)
	}
	return warmLoad(ctx, "http://"+addr+"/", duration)
}
