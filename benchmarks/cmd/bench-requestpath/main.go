// Command bench-requestpath measures what sless costs on the request path:
// the same function process is loaded directly, through a plain TCP relay
// process (the floor: what any extra process on the path costs on this
// machine), through a real `sless queue-proxy` process, and through an
// activator process in front of that queue-proxy, at fixed rates and at
// maximum throughput, and each is compared with the direct path. Given
// -knative, Knative Serving's queue-proxy (built by `make bench-knative`) is
// measured the same way beside them. With -rounds N every path is measured
// N times in turn and compared with the direct run of its own round, which
// steadies the figures on a machine whose speed drifts. It prints a
// Markdown table for benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-requestpath -sless bin/sless [-knative bin/knative/queue] [-rounds 3]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/load"
)

// qpEnv is added to the queue-proxy's environment.
var qpEnv []string

func main() {
	if port := os.Getenv("BENCH_HELLO_PORT"); port != "" {
		serveHello(port)
		return
	}
	hops.RunIfChild()
	var (
		slessBin    = flag.String("sless", "bin/sless", "the sless binary that runs the queue-proxy")
		duration    = flag.Duration("duration", 10*time.Second, "measured time per scenario and path")
		warmup      = flag.Duration("warmup", 2*time.Second, "unmeasured time before each measurement")
		rates       = flag.String("rates", "1000,5000", "fixed rates (requests/s) to run open-loop")
		connections = flag.Int("connections", 64, "connections for every scenario")
		concurrency = flag.Int("concurrency", 0, "SLESS_CONCURRENCY of the queue-proxy (0 = unlimited)")
		procs       = flag.Int("qp-gomaxprocs", 0, "GOMAXPROCS of the proxy processes (0 = Go's default)")
		rounds      = flag.Int("rounds", 1, "measurements of each path per scenario, taken in turn; the table shows medians")
		only        = flag.String("only", "", "measure only the paths whose names match this regular expression (direct, the baseline, always runs)")
		knative     = flag.String("knative", "", "Knative's queue-proxy binary, to measure beside sless's (it binds 8022, 9090, 9091)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	onlyRE, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-requestpath: -only:", err)
		os.Exit(2)
	}
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench-requestpath: -rounds must be at least 1")
		os.Exit(2)
	}
	if *procs > 0 {
		qpEnv = append(qpEnv, "GOMAXPROCS="+strconv.Itoa(*procs))
	}
	if err := run(ctx, *slessBin, *knative, onlyRE, *duration, *warmup, *rates, *connections, *concurrency, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-requestpath:", err)
		os.Exit(1)
	}
}

// serveHello is the function process: a net/http server, as the Go
// runtime is, answering every request with a short body.
func serveHello(port string) {
	body := []byte("hello, world\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe("127.0.0.1:"+port, h))
	os.Exit(1)
}

func run(ctx context.Context, slessBin, knativeBin string, only *regexp.Regexp, duration, warmup time.Duration, rateList string, conns, concurrency, rounds int) error {
	ports, err := hops.FreePorts(8)
	if err != nil {
		return err
	}
	userPort, servingPort, adminPort, knServingPort, knTLSPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	actPort, actAdminPort, relayPort := ports[5], ports[6], ports[7]
	self, err := os.Executable()
	if err != nil {
		return err
	}
	hello := exec.Command(self)
	hello.Env = append(os.Environ(), "BENCH_HELLO_PORT="+strconv.Itoa(userPort))
	hello.Stderr = os.Stderr
	qp := exec.Command(slessBin, "queue-proxy")
	qp.Env = append(os.Environ(),
		"SLESS_FUNCTION=bench", "SLESS_NAMESPACE=bench",
		"SLESS_USER_PORT="+strconv.Itoa(userPort),
		"SLESS_SERVING_PORT="+strconv.Itoa(servingPort),
		"SLESS_ADMIN_PORT="+strconv.Itoa(adminPort),
		"SLESS_CONCURRENCY="+strconv.Itoa(concurrency),
		"SLESS_DRAIN_SECONDS=1")
	qp.Env = append(qp.Env, qpEnv...)
	qp.Stderr = io.Discard
	act := exec.Command(self)
	act.Env = append(os.Environ(), hops.ActivatorEnv(actPort, actAdminPort, servingPort))
	act.Env = append(act.Env, qpEnv...)
	act.Stderr = os.Stderr
	rel := exec.Command(self)
	rel.Env = append(os.Environ(), hops.RelayEnv(relayPort, userPort))
	rel.Env = append(rel.Env, qpEnv...)
	rel.Stderr = os.Stderr
	procs := []*exec.Cmd{hello, qp, act, rel}
	paths := []path{
		{name: "direct", url: fmt.Sprintf("http://127.0.0.1:%d/", userPort)},
		{name: floorPath, url: fmt.Sprintf("http://127.0.0.1:%d/", relayPort), proc: rel},
		{name: "sless queue-proxy", url: fmt.Sprintf("http://127.0.0.1:%d/", servingPort), proc: qp},
		{name: "sless activator + queue-proxy", url: fmt.Sprintf("http://127.0.0.1:%d/fn/bench/bench/", actPort), proc: act, also: qp},
	}
	if knativeBin != "" {
		kn := exec.Command(knativeBin)
		kn.Env = append(os.Environ(),
			"CONTAINER_CONCURRENCY="+strconv.Itoa(concurrency),
			"QUEUE_SERVING_PORT="+strconv.Itoa(knServingPort),
			"QUEUE_SERVING_TLS_PORT="+strconv.Itoa(knTLSPort),
			"USER_PORT="+strconv.Itoa(userPort),
			"REVISION_TIMEOUT_SECONDS=300",
			"SERVING_LOGGING_CONFIG=", "SERVING_LOGGING_LEVEL=error",
			"SERVING_NAMESPACE=bench", "SERVING_CONFIGURATION=bench", "SERVING_REVISION=bench",
			"SERVING_POD=bench", "SERVING_POD_IP=127.0.0.1")
		kn.Env = append(kn.Env, qpEnv...)
		kn.Stderr = io.Discard
		procs = append(procs, kn)
		paths = append(paths, path{name: "Knative queue-proxy", url: fmt.Sprintf("http://127.0.0.1:%d/", knServingPort), proc: kn})
	}
	for _, c := range procs {
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", c.Path, err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	for _, url := range []string{fmt.Sprintf("http://127.0.0.1:%d/readyz", adminPort), fmt.Sprintf("http://127.0.0.1:%d/readyz", actAdminPort)} {
		if err := hops.WaitOK(ctx, url, nil, 10*time.Millisecond, 30*time.Second); err != nil {
			return err
		}
	}
	if knativeBin != "" {
		// Knative answers its own readiness probe on the serving port.
		probe := http.Header{"K-Network-Probe": {"queue"}}
		if err := hops.WaitOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/", knServingPort), probe, 10*time.Millisecond, 30*time.Second); err != nil {
			return err
		}
	}
	paths = slices.DeleteFunc(paths, func(p path) bool { return p.proc != nil && !only.MatchString(p.name) })
	scenarios, err := parseRates(rateList)
	if err != nil {
		return err
	}
	fmt.Printf("request-path benchmark: %s, %d connections, %v per path after %v warm-up, %d rounds, concurrency %d, %d CPUs\n\n",
		time.Now().UTC().Format(time.DateOnly), conns, duration, warmup, rounds, concurrency, runtime.NumCPU())
	fmt.Println("| scenario | path | throughput (req/s) | p50 | p90 | p99 | errors | proxies' CPU per request |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	var summary []string
	for _, rate := range scenarios {
		name := "max throughput"
		if rate > 0 {
			name = fmt.Sprintf("%.0f req/s", rate)
		}
		o := load.Options{Rate: rate, Connections: conns, Duration: duration, Warmup: warmup}
		runs, err := measureRounds(ctx, paths, o, rounds)
		if err != nil {
			return err
		}
		floor := slices.IndexFunc(paths, func(p path) bool { return p.name == floorPath })
		for i, p := range paths {
			row(name, p.name, runs[i])
			if i > 0 {
				summary = append(summary, compare(name, p.name, runs[i], runs[0]))
			}
			if floor > 0 && i > floor {
				summary = append(summary, againstFloor(name, p.name, runs[i], runs[floor], runs[0]))
			}
		}
	}
	fmt.Println()
	fmt.Println(strings.Join(summary, "\n"))
	return nil
}

// parseRates turns -rates into the scenarios: each fixed rate, then 0 for
// maximum throughput.
func parseRates(list string) ([]float64, error) {
	var rates []float64
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive rate", s)
		}
		rates = append(rates, r)
	}
	return append(rates, 0), nil
}

// sample is one measurement of one path.
type sample struct {
	load.Result
	cpu time.Duration // the proxies' CPU time per request; 0 for direct
}

// measureRounds measures every path rounds times, taking the paths in turn
// within each round, so that each proxied run has a direct run minutes, not
// an hour, away: on a shared VM the machine's speed drifts between them.
// It returns the runs by path, then by round.
func measureRounds(ctx context.Context, paths []path, o load.Options, rounds int) ([][]sample, error) {
	runs := make([][]sample, len(paths))
	for range rounds {
		for i, p := range paths {
			r, err := p.measure(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	return runs, nil
}

// row prints the medians over the rounds of one path.
func row(scenario, path string, runs []sample) {
	var errs int64
	for _, r := range runs {
		errs += r.Errors + r.Requests - r.Codes[200]
	}
	cpu := ""
	if c := median(runs, func(r sample) float64 { return float64(r.cpu) }); c > 0 {
		cpu = fmt.Sprintf("%.1f µs", c/1e3)
	}
	fmt.Printf("| %s | %s | %.0f | %s | %s | %s | %d | %s |\n", scenario, path,
		median(runs, func(r sample) float64 { return r.Throughput }),
		ms(median(runs, p50)), ms(median(runs, p90)), ms(median(runs, p99)), errs, cpu)
}

// floorPath names the TCP relay, the floor the proxies are measured
// against.
const floorPath = "TCP relay (floor)"

// againstFloor summarises a path against the TCP relay of the same rounds:
// the ratio of the latency each adds to the direct path's at p50, and of
// their throughputs (medians over the rounds, with their range).
func againstFloor(scenario, path string, runs, relay, direct []sample) string {
	paired := func(f func(i int) float64) string {
		vals := make([]float64, len(runs))
		for i := range runs {
			vals[i] = f(i)
		}
		mid, lo, hi := spread(vals)
		s := fmt.Sprintf("%.2f×", mid)
		if len(vals) > 1 {
			s += fmt.Sprintf(" (%.2f× to %.2f×)", lo, hi)
		}
		return s
	}
	return fmt.Sprintf("- %s, %s against the relay: added p50 %s the relay's, throughput %s", scenario, path,
		paired(func(i int) float64 { return (p50(runs[i]) - p50(direct[i])) / (p50(relay[i]) - p50(direct[i])) }),
		paired(func(i int) float64 { return runs[i].Throughput / relay[i].Throughput }))
}

// compare summarises a path against the direct runs of the same rounds:
// the median over the rounds of each round's ratio and differences, with
// their range when there are several rounds.
func compare(scenario, path string, runs, direct []sample) string {
	paired := func(f func(r, d sample) float64, format func(float64) string) string {
		vals := make([]float64, len(runs))
		for i := range runs {
			vals[i] = f(runs[i], direct[i])
		}
		mid, lo, hi := spread(vals)
		s := format(mid)
		if len(vals) > 1 {
			s += fmt.Sprintf(" (%s to %s)", format(lo), format(hi))
		}
		return s
	}
	ratio := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	added := func(pct func(sample) float64) func(r, d sample) float64 {
		return func(r, d sample) float64 { return pct(r) - pct(d) }
	}
	return fmt.Sprintf("- %s, %s: throughput ratio %s; added latency p50 %s, p90 %s, p99 %s", scenario, path,
		paired(func(r, d sample) float64 { return r.Throughput / d.Throughput }, ratio),
		paired(added(p50), diff), paired(added(p90), diff), paired(added(p99), diff))
}

func p50(r sample) float64 { return float64(r.Latency.P50) }
func p90(r sample) float64 { return float64(r.Latency.P90) }
func p99(r sample) float64 { return float64(r.Latency.P99) }

// median is the median of f over runs.
func median(runs []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(runs))
	for i, r := range runs {
		vals[i] = f(r)
	}
	mid, _, _ := spread(vals)
	return mid
}

// spread sorts vals and returns their median (the upper middle of an even
// count), least and greatest.
func spread(vals []float64) (mid, lo, hi float64) {
	slices.Sort(vals)
	return vals[len(vals)/2], vals[0], vals[len(vals)-1]
}

func ms(ns float64) string { return fmt.Sprintf("%.3f ms", ns/1e6) }

func diff(ns float64) string { return fmt.Sprintf("%+.3f ms", ns/1e6) }

// path is one way to the function: direct, or through a proxy process.
type path struct {
	name string
	url  string
	proc *exec.Cmd // the proxy, whose CPU time is measured; nil for direct
	also *exec.Cmd // a second proxy on the path, whose CPU time is added
}

// measure runs the load against the path and returns the proxy's CPU time
// per request, counting the warm-up requests in.
func (p path) measure(ctx context.Context, o load.Options) (sample, error) {
	o.URL = p.url
	if p.proc == nil {
		r, err := load.Run(ctx, o)
		return sample{Result: r}, err
	}
	cpu0, err := p.cpuTime()
	if err != nil {
		return sample{}, err
	}
	r, err := load.Run(ctx, o)
	if err != nil {
		return sample{}, err
	}
	cpu1, err := p.cpuTime()
	if err != nil {
		return sample{}, err
	}
	total := float64(r.Requests) * float64(o.Duration+o.Warmup) / float64(o.Duration)
	return sample{Result: r, cpu: time.Duration(float64(cpu1-cpu0) / total)}, nil
}

// cpuTime is the CPU time of the path's proxies.
func (p path) cpuTime() (time.Duration, error) {
	t, err := hops.CPUTime(p.proc.Process.Pid)
	if err != nil || p.also == nil {
		return t, err
	}
	t2, err := hops.CPUTime(p.also.Process.Pid)
	return t + t2, err
}
