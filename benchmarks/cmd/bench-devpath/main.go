// Command bench-devpath measures the request path of `sless dev` for a warm
// function against its floor, in one run: the same runtime (the Go hello
// sample by default) loaded directly, through a TCP relay process in front
// of that process (the floor: what one more process on the path costs),
// through a real `sless dev` process (activator and queue-proxy in one
// process, in front of an instance of the same runtime), and through an
// activator process alone in front of the direct process (no queue-proxy:
// the least a middle process that routes HTTP costs, and so the floor of
// any way of folding the queue-proxy into the activator). Every path is
// measured -rounds times in turn, closed-loop; the table shows medians and
// each ratio is the median of the rounds' paired ratios, with their range.
//
//	go run ./benchmarks/cmd/bench-devpath -sless bin/sless [-rounds 3] [-duration 5s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/devharness"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/load"
)

func main() {
	hops.RunIfChild()
	var (
		slessBin    = flag.String("sless", "bin/sless", "the sless binary whose `sless dev` is measured")
		rt          = flag.String("runtime", "go", "the hello sample's runtime: go, python or node")
		duration    = flag.Duration("duration", 5*time.Second, "measured time per path and round")
		warmup      = flag.Duration("warmup", time.Second, "unmeasured time before each measurement")
		connections = flag.Int("connections", 16, "closed-loop connections")
		rounds      = flag.Int("rounds", 3, "measurements of each path, taken in turn")
		samples     = flag.String("samples", "config/samples/functions", "the directory holding the hello samples")
		cacheDir    = flag.String("cache-dir", "bin/bench-cache", "builds kept between runs")
		only        = flag.String("only", "", "measure only the paths whose names match this regular expression (direct, the baseline, always runs)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench-devpath: -rounds must be at least 1")
		os.Exit(2)
	}
	onlyRE, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-devpath: -only:", err)
		os.Exit(2)
	}
	o := load.Options{Connections: *connections, Duration: *duration, Warmup: *warmup}
	if err := run(ctx, *slessBin, v1alpha1.Runtime(*rt), *samples, *cacheDir, onlyRE, o, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-devpath:", err)
		os.Exit(1)
	}
}

// path is one way to the function; proc, when set, is the process in the
// middle, whose CPU time is measured.
type path struct {
	name string
	url  string
	proc *exec.Cmd
}

// sample is one measurement of one path.
type sample struct {
	load.Result
	cpu time.Duration // the middle process's CPU per request
}

func run(ctx context.Context, slessBin string, rt v1alpha1.Runtime, samples, cacheDir string, only *regexp.Regexp, o load.Options, rounds int) error {
	samples, err := filepath.Abs(samples)
	if err != nil {
		return err
	}
	if cacheDir, err = filepath.Abs(cacheDir); err != nil {
		return err
	}
	ports, err := hops.FreePorts(4)
	if err != nil {
		return err
	}
	userPort, relayPort, actPort, actAdmin := ports[0], ports[1], ports[2], ports[3]

	// The runtime process alone, and the relay in front of it.
	proc, err := hops.PrepareHello(ctx, rt, samples, cacheDir)
	if err != nil {
		return err
	}
	direct := exec.Command(proc.Path, proc.Args...)
	direct.Dir = proc.Dir
	direct.Env = append(append(os.Environ(), proc.Env...), "PORT="+strconv.Itoa(userPort))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	relay := exec.Command(self)
	relay.Env = append(os.Environ(), hops.RelayEnv(relayPort, userPort))
	relay.Stderr = os.Stderr
	act := exec.Command(self)
	act.Env = append(os.Environ(), hops.ActivatorEnv(actPort, actAdmin, userPort))
	act.Stderr = os.Stderr
	for _, c := range []*exec.Cmd{direct, relay, act} {
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", c.Path, err)
		}
		defer func() { _ = c.Process.Signal(syscall.SIGTERM); _ = c.Wait() }()
	}

	// sless dev with one instance of the same sample, that stays up.
	dev, err := devharness.Start("bench-devpath", slessBin, devharness.Options{CacheDir: cacheDir, AllowExternalSources: true,
		Drain: 2 * time.Second, Functions: []devharness.Manifest{{Name: "warm", Runtime: rt,
			Source: filepath.Join(samples, "hello-"+string(rt)), Scale: "{min: 1, initial: 1, max: 1, window: 1h}"}}})
	if err != nil {
		return err
	}
	defer dev.Stop()

	paths := []path{
		{name: "direct", url: fmt.Sprintf("http://127.0.0.1:%d/", userPort)},
		{name: floorPath, url: fmt.Sprintf("http://127.0.0.1:%d/", relayPort), proc: relay},
		{name: "sless dev", url: dev.URL("default", "warm"), proc: dev.Cmd},
		{name: activatorPath, url: fmt.Sprintf("http://127.0.0.1:%d/fn/bench/bench/", actPort), proc: act},
	}
	paths = slices.DeleteFunc(paths, func(p path) bool { return p.proc != nil && !only.MatchString(p.name) })
	for _, p := range paths {
		if err := hops.WaitOK(ctx, p.url, nil, 50*time.Millisecond, 10*time.Minute); err != nil { // the first Go build takes a while
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}

	runs := make([][]sample, len(paths))
	for range rounds {
		for i, p := range paths {
			s, err := measure(ctx, p, o)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			runs[i] = append(runs[i], s)
		}
	}

	fmt.Printf("warm hello-%s: %s, closed loop, %d connections, %v per path after %v warm-up, %d rounds, %d CPUs, %s\n\n",
		rt, time.Now().UTC().Format(time.DateOnly), o.Connections, o.Duration, o.Warmup, rounds, runtime.NumCPU(), slessBin)
	fmt.Println("| path | throughput (req/s) | p50 | p99 | errors | middle process's CPU per request | throughput / direct | throughput / relay | CPU per request / relay's |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for i, p := range paths {
		var errs int64
		for _, r := range runs[i] {
			errs += r.Errors + r.Requests - r.Codes[200]
		}
		cpu := ""
		if c := median(runs[i], func(_ int, s sample) float64 { return float64(s.cpu) }); c > 0 {
			cpu = fmt.Sprintf("%.1f µs", c/1e3)
		}
		vsDirect, vsRelay, cpuVsRelay := "", "", ""
		throughput := func(s sample) float64 { return s.Throughput }
		if i > 0 {
			vsDirect = paired(runs[i], runs[0], throughput)
		}
		if i > 1 && paths[1].name == floorPath {
			vsRelay = paired(runs[i], runs[1], throughput)
			cpuVsRelay = paired(runs[i], runs[1], func(s sample) float64 { return float64(s.cpu) })
		}
		fmt.Printf("| %s | %.0f | %s | %s | %d | %s | %s | %s | %s |\n", p.name,
			median(runs[i], func(_ int, s sample) float64 { return s.Throughput }),
			ms(median(runs[i], func(_ int, s sample) float64 { return float64(s.Latency.P50) })),
			ms(median(runs[i], func(_ int, s sample) float64 { return float64(s.Latency.P99) })),
			errs, cpu, vsDirect, vsRelay, cpuVsRelay)
	}
	return nil
}

// floorPath names the TCP relay, the floor sless dev is measured against;
// activatorPath the activator alone.
const (
	floorPath     = "TCP relay (floor)"
	activatorPath = "activator alone (no queue-proxy)"
)

// measure loads one path and takes its middle process's CPU time per
// request, the warm-up's requests counted in.
func measure(ctx context.Context, p path, o load.Options) (sample, error) {
	o.URL = p.url
	var cpu0 time.Duration
	if p.proc != nil {
		var err error
		if cpu0, err = hops.CPUTime(p.proc.Process.Pid); err != nil {
			return sample{}, err
		}
	}
	r, err := load.Run(ctx, o)
	if err != nil {
		return sample{}, err
	}
	s := sample{Result: r}
	if p.proc != nil {
		cpu1, err := hops.CPUTime(p.proc.Process.Pid)
		if err != nil {
			return sample{}, err
		}
		total := float64(r.Requests) * float64(o.Duration+o.Warmup) / float64(o.Duration)
		s.cpu = time.Duration(float64(cpu1-cpu0) / total)
	}
	return s, nil
}

// paired is the median over the rounds of f of runs over f of base in
// the same round, with the range.
func paired(runs, base []sample, f func(sample) float64) string {
	vals := make([]float64, len(runs))
	for i := range runs {
		vals[i] = f(runs[i]) / f(base[i])
	}
	slices.Sort(vals)
	s := fmt.Sprintf("%.2f", vals[len(vals)/2])
	if len(vals) > 1 {
		s += fmt.Sprintf(" (%.2f–%.2f)", vals[0], vals[len(vals)-1])
	}
	return s
}

func median(runs []sample, f func(int, sample) float64) float64 {
	vals := make([]float64, len(runs))
	for i, r := range runs {
		vals[i] = f(i, r)
	}
	slices.Sort(vals)
	return vals[len(vals)/2]
}

func ms(ns float64) string { return fmt.Sprintf("%.3f ms", ns/1e6) }
