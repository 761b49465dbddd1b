// Command bench-metrics measures what a scrape of `sless dev`'s /metrics
// costs with many functions, each in the state of a busy one: it had one
// cold start (its first request waited at zero), has one ready instance,
// and has served HTTP requests (200) through the activator. It runs the
// real `sless dev` binary on a directory of -functions manifests of the
// Python hello sample (the lightest runtime to start a thousand of:
// Go builds a binary per function), starts each function with one
// request, then reads the page once to count its series (per function,
// by family, and the Go runtime's and the process's apart), and scrapes
// it back to back, in plain text and gzipped, with Prometheus's Accept
// header: -scrapes scrapes a batch, or fewer when they take longer than
// -max-batch.
//
// CPU per scrape is measured three ways. The process's CPU over the batch
// (/proc) includes sless dev's background work (the queue-proxies' probes,
// the autoscaler's reads of every instance each second, the manifests'
// polling); less the idle rate measured just before, it is the scrape's
// share only when the machine has CPU to spare, since on a busy one the
// scrape delays the background work instead of adding to it. So perf
// records each batch, and the samples whose call stack is a scrape's (the
// /metrics handler, the gatherers and the collectors they run, the
// encoding) give the scrape's own CPU: the batch's CPU times their share.
//
// The floor, measured in the same run and the same ways, is a bare
// promhttp handler over a plain registry in a process of its own: the
// same sless_ series (same names, types, labels, buckets and label
// values) registered directly as counter, gauge and histogram vectors,
// beside the same Go and process collectors.
//
// Build it with go build: go run strips the binary, and perf could not
// name the floor's functions.
//
//	go build -o bin/bench-metrics ./benchmarks/cmd/bench-metrics
//	bin/bench-metrics -sless bin/sless [-functions 1000] [-scrapes 50] [-rounds 2] [-perf perf.data]
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/devharness"
)

func main() {
	if spec := os.Getenv(floorEnv); spec != "" {
		serveFloor(spec) // never returns
	}
	var (
		slessBin  = flag.String("sless", "bin/sless", "the sless binary whose `sless dev` is measured")
		functions = flag.Int("functions", 1000, "functions, each with one ready instance")
		scrapes   = flag.Int("scrapes", 50, "scrapes per batch (one batch per page, encoding and round)")
		rounds    = flag.Int("rounds", 2, "measurements of each page and encoding, taken in turn")
		idle      = flag.Duration("idle", 3*time.Second, "the idle interval measured before each batch, whose CPU rate is subtracted")
		maxBatch  = flag.Duration("max-batch", 10*time.Second, "a batch ends after -scrapes scrapes or this long, whichever comes first (at least one scrape)")
		parallel  = flag.Int("parallel", 8, "cold starts at once")
		samples   = flag.String("samples", "config/samples/functions", "the directory holding hello-python")
		noPerf    = flag.Bool("no-perf", false, "do not record the batches with perf (then only the process's CPU over each batch is shown)")
		perfOut   = flag.String("perf", "", "when set, keep the perf recording of sless dev's last gzip batch in this file (perf report -i FILE)")
	)
	flag.Parse()
	if *functions < 1 || *scrapes < 1 || *rounds < 1 || *parallel < 1 || *idle <= 0 || *maxBatch <= 0 {
		fmt.Fprintln(os.Stderr, "bench-metrics: -functions, -scrapes, -rounds, -parallel, -idle and -max-batch must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := config{sless: *slessBin, functions: *functions, scrapes: *scrapes, rounds: *rounds, idle: *idle, maxBatch: *maxBatch,
		parallel: *parallel, samples: *samples, perf: *perfOut, usePerf: !*noPerf}
	if c.usePerf && !perfAvailable() {
		fmt.Fprintln(os.Stderr, "bench-metrics: no perf on PATH: the scrapes' own CPU is not measured (-no-perf to go on without)")
		os.Exit(2)
	}
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-metrics:", err)
		os.Exit(1)
	}
}

type config struct {
	sless                                string
	functions, scrapes, rounds, parallel int
	idle, maxBatch                       time.Duration
	samples, perf                        string
	usePerf                              bool
}

// acceptText is the Accept header of Prometheus 3's scrapes with its
// default scrape_protocols: OpenMetrics first, then the Prometheus text
// format. sless serves the text format (promhttp without OpenMetrics).
const acceptText = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// acceptProto asks for the delimited protobuf format, which the benchmark
// reads to build the floor's registry.
const acceptProto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"

// The pages measured, each served by its own process.
const (
	devTarget   = "sless dev"
	floorTarget = "floor"
)

// run makes the functions busy, reads sless dev's page and starts the
// floor serving the same series, measures both and reports.
func run(ctx context.Context, c config) error {
	samples, err := filepath.Abs(c.samples)
	if err != nil {
		return err
	}
	slessBin, err := filepath.Abs(c.sless)
	if err != nil {
		return err
	}
	names := make([]string, c.functions)
	for i := range names {
		names[i] = fmt.Sprintf("m-%04d", i+1)
	}
	// sless dev's cache is in its run's directory, which every
	// instance's command line names: how leftovers are found at its stop.
	dev, err := devharness.Start("bench-metrics", slessBin, devharness.Options{
		Functions: functions(filepath.Join(samples, "hello-python"), names), AllowExternalSources: true, Drain: 10 * time.Second})
	if err != nil {
		return err
	}
	defer dev.Stop()
	cold, err := makeBusy(ctx, dev, names, c.parallel)
	if err != nil {
		return withOutput(dev, err)
	}
	devURL := "http://" + dev.Admin + "/metrics"
	comp, err := readBusyPage(ctx, devURL, names)
	if err != nil {
		return withOutput(dev, err)
	}
	floor, err := startFloor(ctx, devURL, dev.Dir())
	if err != nil {
		return err
	}
	defer floor.stop()
	floorComp, err := floor.composition(ctx, names)
	if err != nil {
		return err
	}
	if floorComp.sless != comp.sless || floorComp.other != comp.other {
		return fmt.Errorf("the floor's page has %d sless_ and %d other series, sless dev's %d and %d",
			floorComp.sless, floorComp.other, comp.sless, comp.other)
	}
	targets := []target{
		{name: devTarget, url: devURL, pid: dev.Pid()},
		{name: floorTarget, url: floor.url, pid: floor.cmd.Process.Pid},
	}
	results, err := measureAll(ctx, c, targets, dev.Dir())
	if err != nil {
		return err
	}
	report(c, comp, floorComp, results, cold, rss(dev.Pid()))
	return nil
}

// functions are one Function per name, each the Python hello at zero
// instances until its first request, with a window long enough that it
// keeps its one instance through the run.
func functions(source string, names []string) []devharness.Manifest {
	fns := make([]devharness.Manifest, len(names))
	for i, name := range names {
		fns[i] = devharness.Manifest{Name: name, Runtime: v1alpha1.RuntimePython, Source: source, Handler: "main.handle",
			Scale: "{min: 0, initial: 0, max: 1, window: 1h}"}
	}
	return fns
}

// withOutput adds to err what sless dev said of it: the end of its
// output, and its port clashes and running out of files, if any.
func withOutput(dev *devharness.Process, err error) error {
	return fmt.Errorf("%w\nthe end of sless dev's output:\n%s\nits port clashes and running out of files, if any:\n%s",
		err, dev.LogTail(20), dev.LogLines([]string{"Address already in use", "too many open files"}, 10))
}

// coldStartRun is how the functions were cold-started: how long all took,
// and those whose first request was sent again.
type coldStartRun struct {
	took    time.Duration
	retried []string
}

// makeBusy waits for the functions to be prepared, cold-starts each with
// one request, parallel at once, and waits for each to have its one ready
// instance.
func makeBusy(ctx context.Context, dev *devharness.Process, names []string, parallel int) (coldStartRun, error) {
	fmt.Fprintf(os.Stderr, "waiting for %d functions to be prepared...\n", len(names))
	if err := dev.Wait(ctx, 5*time.Minute, devharness.Idle); err != nil {
		return coldStartRun{}, err
	}
	fmt.Fprintf(os.Stderr, "cold-starting %d functions, %d at once...\n", len(names), parallel)
	start := time.Now()
	wctx, cancel := context.WithCancelCause(ctx)
	go watchFiles(wctx, cancel, dev.Pid())
	retried, err := coldStarts(wctx, dev, names, parallel)
	err = cmp.Or(context.Cause(wctx), err)
	cancel(nil)
	if err != nil {
		return coldStartRun{}, err
	}
	run := coldStartRun{took: time.Since(start), retried: retried}
	if len(retried) > 0 {
		fmt.Fprintf(os.Stderr, "%d functions needed their first request sent again; sless dev said:\n%s\n",
			len(retried), dev.LogLines([]string{"crash", "in use", "error"}, 20))
	}
	return run, dev.Wait(ctx, time.Minute, devharness.ReadyWith(1))
}

// coldStarts sends one request to each function, parallel at once; each
// finds its function at zero and waits for its first instance. A function
// whose request needed sending again (coldStart) is returned, with its
// first failure.
func coldStarts(ctx context.Context, dev *devharness.Process, names []string, parallel int) ([]string, error) {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		retried []string
	)
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) || ctx.Err() != nil {
					return
				}
				tries, first, err := coldStart(ctx, dev.URL("default", names[i])+"?name=metrics")
				mu.Lock()
				if first != nil && err == nil {
					retried = append(retried, fmt.Sprintf("%s (%d tries; first: %v)", names[i], tries, first))
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %d tries: %w", names[i], tries, err))
				}
				mu.Unlock()
				if err != nil {
					return
				}
				if (i+1)%100 == 0 {
					fmt.Fprintf(os.Stderr, "  %d started\n", i+1)
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(retried)
	return retried, cmp.Or(errors.Join(errs...), ctx.Err())
}

// coldStart sends a function its first request; one that fails, or takes
// longer than tryTimeout, is sent again 2 s later, up to maxTries in all.
// It returns the tries, the first failure and the last.
func coldStart(ctx context.Context, url string) (tries int, first, last error) {
	const (
		maxTries   = 4
		tryTimeout = 45 * time.Second
	)
	for tries = 1; ; tries++ {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		body, err := get(tctx, url, "", false)
		cancel()
		if err == nil && !json.Valid(body) {
			err = fmt.Errorf("not JSON: %q", body)
		}
		first, last = cmp.Or(first, err), err
		if err == nil || tries == maxTries || ctx.Err() != nil {
			return tries, first, last
		}
		time.Sleep(2 * time.Second)
	}
}

// measureAll takes a batch of every target and encoding, in turn, c.rounds
// times, then, with perf, a gzip batch of each recorded, and returns the
// batches by batchKey and perfKey.
func measureAll(ctx context.Context, c config, targets []target, dir string) (map[string][]batch, error) {
	results := map[string][]batch{}
	take := func(t target, gz bool, key, perfFile string) error {
		b, err := measure(ctx, t, gz, c.scrapes, c.maxBatch, c.idle, perfFile)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		results[key] = append(results[key], b)
		fmt.Fprintf(os.Stderr, "  %s: %d scrapes in %v, %v of CPU (%v while idle for %v); perf: %d samples, %d in the scrapes' stacks\n",
			key, b.scrapes, b.wall.Round(time.Millisecond), b.cpu, b.idleCPU, b.idle.Round(time.Millisecond), b.attr.samples, b.attr.scrape)
		return nil
	}
	for r := range c.rounds {
		fmt.Fprintf(os.Stderr, "round %d of %d...\n", r+1, c.rounds)
		for _, t := range targets {
			for _, gz := range []bool{false, true} { // plain, gzip
				if err := take(t, gz, batchKey(t.name, gz), ""); err != nil {
					return nil, err
				}
			}
		}
	}
	if !c.usePerf {
		return results, nil
	}
	// perf slows a busy sless dev down (its thousands of threads), so it
	// records batches of its own, after the rounds: gzip, as Prometheus
	// scrapes.
	fmt.Fprintln(os.Stderr, "recording gzip batches with perf...")
	for _, t := range targets {
		perfFile := filepath.Join(dir, "perf.data")
		if err := take(t, true, perfKey(t.name), perfFile); err != nil {
			return nil, err
		}
		if c.perf != "" && t.name == devTarget {
			if err := os.Rename(perfFile, c.perf); err != nil {
				return nil, err
			}
		}
	}
	return results, nil
}

// watchFiles cancels ctx when the process holds more than 3/4 of the
// files it may open: an instance whose runtime lost its port to its own
// queue-proxy (both ask the kernel for a free port, and the runtime binds
// later) has its queue-proxy probe itself, each hop a new connection,
// until the whole platform is out of files. Better to stop then than to
// wait for every request to time out.
func watchFiles(ctx context.Context, cancel context.CancelCauseFunc, pid int) {
	limit := 0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(line, "Max open files") {
				limit, _ = strconv.Atoi(f[3])
			}
		}
	}
	if limit <= 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && len(fds) > limit*3/4 {
			cancel(fmt.Errorf("sless dev holds %d files of the %d it may open: running out (look for a port clash below)", len(fds), limit))
			return
		}
	}
}
