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
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/local"
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

func run(ctx context.Context, c config) error {
	samples, err := filepath.Abs(c.samples)
	if err != nil {
		return err
	}
	slessBin, err := filepath.Abs(c.sless)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-metrics")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fnDir, cacheDir := filepath.Join(dir, "functions"), filepath.Join(dir, "cache")
	if err := os.MkdirAll(fnDir, 0o755); err != nil {
		return err
	}
	names := make([]string, c.functions)
	for i := range names {
		names[i] = fmt.Sprintf("m-%04d", i+1)
	}
	if err := writeManifests(fnDir, filepath.Join(samples, "hello-python"), names); err != nil {
		return err
	}
	ports, err := hops.FreePorts(2)
	if err != nil {
		return err
	}
	listen, admin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])

	// sless dev, with its own cache under dir: every instance's command
	// line names dir, which is how leftovers are found at the end.
	logFile, err := os.Create(filepath.Join(dir, "sless-dev.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	dev := exec.Command(slessBin, "dev", "--functions", fnDir, "--cache-dir", cacheDir, "--allow-external-sources",
		"--listen", listen, "--admin", admin, "--drain", "10s", "--amqp-url", "", "--database-url", "")
	dev.Stdout, dev.Stderr = logFile, logFile
	if err := dev.Start(); err != nil {
		return fmt.Errorf("start sless dev: %w", err)
	}
	defer stopDev(dev, dir)
	fail := func(err error) error {
		log := filepath.Join(dir, "sless-dev.log")
		return fmt.Errorf("%w\nthe end of sless dev's output:\n%s\nits port clashes and running out of files, if any:\n%s",
			err, tail(log, 20), grep(log, []string{"Address already in use", "too many open files"}, 10))
	}

	fmt.Fprintf(os.Stderr, "waiting for %d functions to be prepared...\n", c.functions)
	if err := waitFunctions(ctx, admin, c.functions, 5*time.Minute, func(st local.FunctionStatus) bool {
		return st.State == "idle"
	}); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "cold-starting %d functions, %d at once...\n", c.functions, c.parallel)
	start := time.Now()
	wctx, cancel := context.WithCancelCause(ctx)
	go watchFiles(wctx, cancel, dev.Process.Pid)
	retried, err := coldStarts(wctx, listen, names, c.parallel)
	err = cmp.Or(context.Cause(wctx), err)
	cancel(nil)
	if err != nil {
		return fail(err)
	}
	coldTook := time.Since(start)
	if len(retried) > 0 {
		fmt.Fprintf(os.Stderr, "%d functions needed their first request sent again; sless dev said:\n%s\n",
			len(retried), grep(filepath.Join(dir, "sless-dev.log"), []string{"crash", "in use", "error"}, 20))
	}
	if err := waitFunctions(ctx, admin, c.functions, time.Minute, func(st local.FunctionStatus) bool {
		return st.State == "ready" && st.Ready == 1
	}); err != nil {
		return fail(err)
	}
	metricsURL := "http://" + admin + "/metrics"
	page, err := settle(ctx, metricsURL, 30*time.Second)
	if err != nil {
		return fail(err)
	}
	comp := analyse(page, names)
	if err := checkBusy(page, names[0]); err != nil {
		return err
	}

	// The floor, from the same page's families.
	famFile := filepath.Join(dir, "families.pb")
	if err := saveFamilies(ctx, metricsURL, famFile); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The floor's listener is made here and handed over, since sless dev
	// takes free ports for its instances all along.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	floor := exec.Command(self)
	floor.Env = append(os.Environ(), floorEnv+"="+famFile)
	floor.ExtraFiles = []*os.File{lnFile} // fd 3
	floor.Stdout, floor.Stderr = os.Stderr, os.Stderr
	err = floor.Start()
	lnFile.Close()
	ln.Close()
	if err != nil {
		return err
	}
	defer func() { _ = floor.Process.Kill(); _ = floor.Wait() }()
	floorURL := "http://" + ln.Addr().String() + "/metrics"
	floorPage, err := waitPage(ctx, floorURL, time.Minute)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	floorComp := analyse(floorPage, names)
	if floorComp.sless != comp.sless || floorComp.other != comp.other {
		return fmt.Errorf("the floor's page has %d sless_ and %d other series, sless dev's %d and %d",
			floorComp.sless, floorComp.other, comp.sless, comp.other)
	}

	targets := []target{
		{name: "sless dev", url: metricsURL, pid: dev.Process.Pid},
		{name: "floor", url: floorURL, pid: floor.Process.Pid},
	}
	encodings := []bool{false, true} // plain, gzip
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
			for _, gz := range encodings {
				if err := take(t, gz, batchKey(t.name, gz), ""); err != nil {
					return err
				}
			}
		}
	}
	// perf slows a busy sless dev down (its thousands of threads), so it
	// records batches of its own, after the rounds: gzip, as Prometheus
	// scrapes.
	if c.usePerf {
		fmt.Fprintln(os.Stderr, "recording gzip batches with perf...")
		for _, t := range targets {
			perfFile := filepath.Join(dir, "perf.data")
			if err := take(t, true, perfKey(t.name), perfFile); err != nil {
				return err
			}
			if c.perf != "" && t.pid == dev.Process.Pid {
				if err := os.Rename(perfFile, c.perf); err != nil {
					return err
				}
			}
		}
	}
	report(c, comp, floorComp, results, coldTook, rss(dev.Process.Pid), retried)
	return nil
}

// writeManifests writes one Function per name, each the Python hello at
// zero instances until its first request, with a window long enough that
// it keeps its one instance through the run.
func writeManifests(dir, source string, names []string) error {
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: %s}
spec:
  runtime: python
  source: %s
  handler: main.handle
  scale: {min: 0, initial: 0, max: 1, window: 1h}
---
`, name, source)
	}
	return os.WriteFile(filepath.Join(dir, "functions.yaml"), []byte(b.String()), 0o644)
}

// stopDev stops sless dev (it drains, then stops its instances), kills it
// if it has not exited within a minute, then kills any instance process
// left behind: those whose command line names dir.
func stopDev(dev *exec.Cmd, dir string) {
	_ = dev.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = dev.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = dev.Process.Kill()
		<-done
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			fmt.Fprintf(os.Stderr, "killing left-over process %d\n", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

var client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}

// waitFunctions polls the admin API until n functions satisfy ok, for at
// most within; a failed or crashing function ends the wait.
func waitFunctions(ctx context.Context, admin string, n int, within time.Duration, ok func(local.FunctionStatus) bool) error {
	deadline := time.Now().Add(within)
	have := 0
	for {
		var list struct {
			Functions []local.FunctionStatus `json:"functions"`
		}
		body, err := get(ctx, "http://"+admin+"/v1/functions", "", false)
		if err == nil {
			if err := json.Unmarshal(body, &list); err != nil {
				return err
			}
			have = 0
			for _, st := range list.Functions {
				if st.State == "failed" || st.State == "crashing" {
					return fmt.Errorf("%s/%s: %s: %s", st.Namespace, st.Name, st.State, st.Error)
				}
				if ok(st) {
					have++
				}
			}
			if have == n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d functions as wanted after %v", have, n, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// coldStarts sends one request to each function, parallel at once; each
// finds its function at zero and waits for its first instance. A request
// that fails, or takes longer than tryTimeout, is sent again 2 s later,
// up to maxTries in all: the functions that needed it are returned, with
// their first failure.
func coldStarts(ctx context.Context, listen string, names []string, parallel int) ([]string, error) {
	const (
		maxTries   = 4
		tryTimeout = 45 * time.Second
	)
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
				var first, last error
				try := 1
				for ; ; try++ {
					tctx, cancel := context.WithTimeout(ctx, tryTimeout)
					body, err := get(tctx, "http://"+listen+"/fn/default/"+names[i]+"?name=metrics", "", false)
					cancel()
					if err == nil && !json.Valid(body) {
						err = fmt.Errorf("not JSON: %q", body)
					}
					first, last = cmp.Or(first, err), err
					if err == nil || try == maxTries || ctx.Err() != nil {
						break
					}
					time.Sleep(2 * time.Second)
				}
				if first != nil && last == nil {
					mu.Lock()
					retried = append(retried, fmt.Sprintf("%s (%d tries; first: %v)", names[i], try, first))
					mu.Unlock()
				}
				if err := last; err != nil {
					err = fmt.Errorf("%d tries: %w", try, err)
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", names[i], err))
					mu.Unlock()
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

// grep is the first n lines of a file that contain one of words.
func grep(file string, words []string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if len(out) < n && slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
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

// tail is the last n lines of a file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// get fetches url and returns its body, which must come with a 200.
func get(ctx context.Context, url, accept string, gz bool) ([]byte, error) {
	body, _, err := getWithHeader(ctx, url, accept, gz)
	return body, err
}

// getWithHeader is get that also returns the answer's header.
func getWithHeader(ctx context.Context, url, accept string, gz bool) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: %d %.200s", url, resp.StatusCode, body)
	}
	return body, resp.Header, nil
}

// settle reads the page every 2 s until its series stop changing in
// number (the autoscaler's gauges come with its next decision), for at
// most within, and returns the last one.
func settle(ctx context.Context, url string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	last := -1
	for {
		page, err := get(ctx, url, acceptText, false)
		if err != nil {
			return nil, err
		}
		n := bytes.Count(page, []byte("\nsless_"))
		if n == last || time.Now().After(deadline) {
			return page, nil
		}
		last = n
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// waitPage polls url until it serves the page, for at most within.
func waitPage(ctx context.Context, url string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	for {
		page, err := get(ctx, url, acceptText, false)
		if err == nil {
			return page, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkBusy checks that fn's series say what the benchmark meant: one
// cold start, one ready instance, its requests answered 200.
func checkBusy(page []byte, fn string) error {
	want := []string{
		`sless_cold_starts_total{function="` + fn + `",namespace="default"} 1`,
		`sless_activator_requests_total{code="200",function="` + fn + `",namespace="default"} 1`,
		`sless_autoscaler_ready_replicas{function="` + fn + `",namespace="default"} 1`,
	}
	for _, w := range want {
		if !bytes.Contains(page, []byte("\n"+w+"\n")) {
			return fmt.Errorf("the page has no %s", w)
		}
	}
	return nil
}

// composition is what a page is made of, in series (sample lines, as
// Prometheus counts them: a histogram's buckets, sum and count each).
type composition struct {
	total, sless, slessNoFunction, other int
	bytes                                int
	// perFunction counts each function's sless_ series; families, the
	// first function's by family.
	perFunction   map[string]int
	families      map[string]int
	familyTypes   map[string]string
	otherFamilies map[string]int
}

func analyse(page []byte, names []string) composition {
	c := composition{bytes: len(page), perFunction: map[string]int{}, families: map[string]int{},
		familyTypes: map[string]string{}, otherFamilies: map[string]int{}}
	first := `function="` + names[0] + `"`
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) == 4 {
				c.familyTypes[f[2]] = f[3]
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		c.total++
		name := line[:strings.IndexAny(line, "{ ")]
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && c.familyTypes[base] == "histogram" {
				family = base
			}
		}
		if !strings.HasPrefix(name, "sless_") {
			c.other++
			c.otherFamilies[strings.SplitN(family, "_", 2)[0]]++
			continue
		}
		c.sless++
		labels := ""
		if i, j := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}'); i >= 0 && j > i {
			labels = line[i+1 : j]
		}
		fn := labelValue(labels, "function")
		if fn == "" {
			c.slessNoFunction++
			continue
		}
		c.perFunction[fn]++
		if strings.Contains(labels, first) {
			c.families[family]++
		}
	}
	return c
}

// labelValue finds name's value in a sample line's labels.
func labelValue(labels, name string) string {
	for _, prefix := range []string{name + `="`, `,` + name + `="`} {
		if i := strings.Index(labels, prefix); i >= 0 && (i == 0 || prefix[0] == ',') {
			rest := labels[i+len(prefix):]
			if j := strings.IndexByte(rest, '"'); j >= 0 {
				return rest[:j]
			}
		}
	}
	return ""
}

// saveFamilies writes the page's families, in the delimited protobuf
// format, to file: what the floor mirrors.
func saveFamilies(ctx context.Context, url, file string) error {
	body, err := get(ctx, url, acceptProto, false)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// target is a page to scrape and the process serving it.
type target struct {
	name, url string
	pid       int
}

// batch is one measurement: scrapes back to back after an idle interval.
type batch struct {
	attr               attribution // perf's, when recorded
	scrapes            int
	wall               time.Duration // the batch's
	cpu, idleCPU       time.Duration // during the batch; during the idle interval
	idle               time.Duration // the idle interval's length
	bytes              int           // of the last scrape's body, as sent
	encoding, contType string
}

// netCPU is the batch's CPU per scrape with the idle rate's share of the
// batch subtracted; rawCPU without.
func (b batch) netCPU() time.Duration {
	background := time.Duration(float64(b.idleCPU) * float64(b.wall) / float64(b.idle))
	return (b.cpu - background) / time.Duration(b.scrapes)
}
func (b batch) rawCPU() time.Duration { return b.cpu / time.Duration(b.scrapes) }

// ownCPU is the CPU per scrape in the scrapes' own stacks: the batch's
// CPU times the share of perf's samples in them.
func (b batch) ownCPU() time.Duration {
	if b.attr.samples == 0 {
		return 0
	}
	return time.Duration(float64(b.cpu) * float64(b.attr.scrape) / float64(b.attr.samples) / float64(b.scrapes))
}
func (b batch) perScrape() time.Duration { return b.wall / time.Duration(b.scrapes) }

// perfKey names the batch perf recorded.
func perfKey(name string) string { return name + "/gzip/perf" }

func batchKey(name string, gz bool) string {
	if gz {
		return name + "/gzip"
	}
	return name + "/plain"
}

// measure takes the process's CPU over an idle interval, then over n
// scrapes back to back on one connection (open since the page was first
// read), or fewer when they take longer than maxBatch. With a perfFile,
// perf records the scrapes.
func measure(ctx context.Context, t target, gz bool, n int, maxBatch, idle time.Duration, perfFile string) (batch, error) {
	var b batch
	cpu0, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return b, ctx.Err()
	case <-time.After(idle):
	}
	cpu1, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	b.idle, b.idleCPU = time.Since(start), cpu1-cpu0
	var rec *recording
	if perfFile != "" {
		if rec, err = startPerf(ctx, t.pid, perfFile); err != nil {
			return b, err
		}
		defer func() {
			if rec != nil {
				_ = rec.stop()
			}
		}()
		if cpu1, err = hops.CPUTime(t.pid); err != nil {
			return b, err
		}
	}
	start = time.Now()
	for ; b.scrapes < n && (b.scrapes == 0 || time.Since(start) < maxBatch); b.scrapes++ {
		size, enc, ct, err := scrape(ctx, t.url, gz)
		if err != nil {
			return b, err
		}
		b.bytes, b.encoding, b.contType = size, enc, ct
	}
	b.wall = time.Since(start)
	cpu2, err := hops.CPUTime(t.pid)
	if err != nil {
		return b, err
	}
	b.cpu = cpu2 - cpu1
	if rec != nil {
		err := rec.stop()
		rec = nil
		if err != nil {
			return b, err
		}
		if b.attr, err = attribute(ctx, perfFile); err != nil {
			return b, err
		}
	}
	return b, nil
}

// scrape reads the page as Prometheus does and returns its size as sent,
// its Content-Encoding and Content-Type; a gzipped body is decompressed
// and checked.
func scrape(ctx context.Context, url string, gz bool) (int, string, string, error) {
	body, header, err := getWithHeader(ctx, url, acceptText, gz)
	if err != nil {
		return 0, "", "", err
	}
	enc := header.Get("Content-Encoding")
	if enc == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return 0, "", "", err
		}
		if _, err := io.Copy(io.Discard, zr); err != nil {
			return 0, "", "", fmt.Errorf("gzipped page: %w", err)
		}
	}
	return len(body), cmp.Or(enc, "identity"), header.Get("Content-Type"), nil
}

// rss is a process's resident memory, from /proc.
func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func report(c config, comp, floorComp composition, results map[string][]batch, coldTook time.Duration, devRSS string, retried []string) {
	n := c.functions
	fmt.Printf("sless dev with %d functions (Python hello, one ready instance each, one cold start and one 200 each; cold starts took %v, %d at once; sless dev's RSS %s): %s, batches of %d scrapes or %v, %d rounds, idle interval %v, %d CPUs, %s\n\n",
		n, coldTook.Round(time.Second), c.parallel, devRSS, time.Now().UTC().Format(time.DateOnly), c.scrapes, c.maxBatch, c.rounds, c.idle, runtime.NumCPU(), c.sless)

	if len(retried) > 0 {
		fmt.Printf("Functions whose first request failed and were sent it again: %s\n\n", strings.Join(retried, "; "))
	}
	lo, hi := -1, -1
	for _, v := range comp.perFunction {
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	fmt.Println("| series on the page | sless dev | per function | floor |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| sless_, all | %d | %.1f | %d |\n", comp.sless, float64(comp.sless)/float64(n), floorComp.sless)
	fmt.Printf("| sless_ of one function (min–max over the %d functions) | | %d–%d | |\n", len(comp.perFunction), lo, hi)
	fmt.Printf("| sless_ with no function label | %d | | %d |\n", comp.slessNoFunction, floorComp.slessNoFunction)
	var other []string
	for _, k := range slices.Sorted(mapKeys(comp.otherFamilies)) {
		other = append(other, fmt.Sprintf("%s_ %d", k, comp.otherFamilies[k]))
	}
	fmt.Printf("| not sless_ (%s) | %d | | %d |\n", strings.Join(other, ", "), comp.other, floorComp.other)
	fmt.Printf("| all | %d | | %d |\n\n", comp.total, floorComp.total)

	fmt.Println("| family (one function's series) | type | series |")
	fmt.Println("|---|---|---|")
	fams := slices.SortedFunc(mapKeys(comp.families), func(a, b string) int {
		return cmp.Or(cmp.Compare(comp.families[b], comp.families[a]), cmp.Compare(a, b))
	})
	sum := 0
	for _, f := range fams {
		fmt.Printf("| `%s` | %s | %d |\n", f, comp.familyTypes[f], comp.families[f])
		sum += comp.families[f]
	}
	fmt.Printf("| all | | %d |\n\n", sum)

	fmt.Println("Per scrape; medians of the rounds (lowest–highest). Process CPU: all of the process's CPU over the batch, divided by its scrapes; idle subtracted: less the process's idle rate measured just before, over the batch's length.")
	fmt.Println()
	fmt.Println("| page, encoding | scrapes a batch | body | process CPU | idle subtracted | wall (mean) | floor: body | floor: process CPU | floor: wall | process CPU / floor's | wall / floor's |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, gz := range []bool{false, true} {
		s, f := results[batchKey("sless dev", gz)], results[batchKey("floor", gz)]
		label := "plain"
		if gz {
			label = "gzip"
		}
		label += fmt.Sprintf(" (%s; %s)", s[0].encoding, s[0].contType)
		var counts []string
		for _, b := range s {
			counts = append(counts, strconv.Itoa(b.scrapes))
		}
		fmt.Printf("| %s | %s (floor %d) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, strings.Join(counts, ", "), f[0].scrapes,
			kib(s[len(s)-1].bytes), spread(s, batch.rawCPU), spread(s, batch.netCPU), spread(s, batch.perScrape),
			kib(f[len(f)-1].bytes), spread(f, batch.rawCPU), spread(f, batch.perScrape),
			ratio(s, f, batch.rawCPU), ratio(s, f, batch.perScrape))
	}
	fmt.Println()
	for _, name := range []string{"sless dev", "floor"} {
		var rates []string
		for _, x := range append(results[batchKey(name, false)], results[batchKey(name, true)]...) {
			rates = append(rates, fmt.Sprintf("%.0f%%", 100*float64(x.idleCPU)/float64(x.idle)))
		}
		fmt.Printf("- %s's CPU while idle, before each batch: %s of a core\n", name, strings.Join(rates, ", "))
	}
	if !c.usePerf {
		return
	}

	s, f := results[perfKey("sless dev")][0], results[perfKey("floor")][0]
	fmt.Println()
	fmt.Printf("A gzipped scrape's own CPU, from a batch perf recorded (at %d Hz, with call stacks): the process's CPU over the batch times the share of the samples whose stack is a scrape's. (perf slows a busy sless dev down: its wall times here are not the scrape's.)\n", perfRate)
	fmt.Println()
	fmt.Println("| | sless dev | floor | ratio |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| scrapes in the batch | %d | %d | |\n", s.scrapes, f.scrapes)
	fmt.Printf("| samples in the scrapes' stacks / all | %d / %d | %d / %d | |\n", s.attr.scrape, s.attr.samples, f.attr.scrape, f.attr.samples)
	fmt.Printf("| own CPU per scrape | %s | %s | %.1f× |\n", msf(s.ownCPU()), msf(f.ownCPU()), float64(s.ownCPU())/float64(f.ownCPU()))
	fmt.Printf("| process CPU per scrape | %s | %s | |\n", msf(s.rawCPU()), msf(f.rawCPU()))
	fmt.Printf("| wall per scrape, under perf | %s | %s | |\n", msf(s.perScrape()), msf(f.perScrape()))

	fmt.Println()
	fmt.Println("Where a gzipped scrape's own CPU goes, ms per scrape (a sample counts in the first part found on its stack, in this order):")
	fmt.Println()
	fmt.Println("| part | sless dev | floor |")
	fmt.Println("|---|---|---|")
	share := func(b batch, n int) string {
		if b.attr.samples == 0 {
			return "n/a"
		}
		return msf(time.Duration(float64(b.cpu) * float64(n) / float64(b.attr.samples) / float64(b.scrapes)))
	}
	for _, p := range parts {
		fmt.Printf("| %s | %s | %s |\n", p.name, share(s, s.attr.parts[p.name]), share(f, f.attr.parts[p.name]))
	}
	fmt.Printf("| all of the scrapes' stacks | %s | %s |\n", share(s, s.attr.scrape), share(f, f.attr.scrape))
	fmt.Printf("| of which assisting the GC | %s | %s |\n", share(s, s.attr.gcAssist), share(f, f.attr.gcAssist))
	fmt.Printf("| not counted above: the background GC workers over the batch (the scrapes' garbage and the rest) | %s | %s |\n",
		share(s, s.attr.gcMark), share(f, f.attr.gcMark))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// spread is the median over the rounds of f, in ms, with the range.
func spread(bs []batch, f func(batch) time.Duration) string {
	vals := make([]time.Duration, len(bs))
	for i, b := range bs {
		vals[i] = f(b)
	}
	slices.Sort(vals)
	s := msf(vals[len(vals)/2])
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%s–%s)", msf(vals[0]), msf(vals[len(vals)-1]))
	}
	return s
}

// ratio is the median over the rounds of f(a) / f(b) of the same round.
func ratio(a, b []batch, f func(batch) time.Duration) string {
	vals := make([]float64, len(a))
	for i := range a {
		vals[i] = float64(f(a[i])) / float64(f(b[i]))
	}
	slices.Sort(vals)
	s := fmt.Sprintf("%.1f×", vals[len(vals)/2])
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%.1f–%.1f)", vals[0], vals[len(vals)-1])
	}
	return s
}

func msf(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
