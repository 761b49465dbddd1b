// Command bench-queueproxy measures what the queue-proxy costs on the
// request path: the same function process is loaded directly and through a
// real `sless queue-proxy` process, in one run, at fixed rates and at
// maximum throughput, and the two are compared. It prints a Markdown table
// for benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-queueproxy -sless bin/sless
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sless.dev/sless/benchmarks/loadgen"
)

// qpEnv is added to the queue-proxy's environment.
var qpEnv []string

func main() {
	if port := os.Getenv("BENCH_HELLO_PORT"); port != "" {
		serveHello(port)
		return
	}
	var (
		slessBin    = flag.String("sless", "bin/sless", "the sless binary that runs the queue-proxy")
		duration    = flag.Duration("duration", 10*time.Second, "measured time per scenario and path")
		warmup      = flag.Duration("warmup", 2*time.Second, "unmeasured time before each measurement")
		rates       = flag.String("rates", "1000,5000", "fixed rates (requests/s) to run open-loop")
		connections = flag.Int("connections", 64, "connections for every scenario")
		concurrency = flag.Int("concurrency", 0, "SLESS_CONCURRENCY of the queue-proxy (0 = unlimited)")
		procs       = flag.Int("qp-gomaxprocs", 0, "GOMAXPROCS of the queue-proxy (0 = Go's default)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *procs > 0 {
		qpEnv = append(qpEnv, "GOMAXPROCS="+strconv.Itoa(*procs))
	}
	if err := run(ctx, *slessBin, *duration, *warmup, *rates, *connections, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "bench-queueproxy:", err)
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

func run(ctx context.Context, slessBin string, duration, warmup time.Duration, rateList string, conns, concurrency int) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	userPort, servingPort, adminPort := ports[0], ports[1], ports[2]
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
	for _, c := range []*exec.Cmd{hello, qp} {
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", c.Path, err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	if err := waitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", adminPort)); err != nil {
		return err
	}

	direct := fmt.Sprintf("http://127.0.0.1:%d/", userPort)
	proxied := fmt.Sprintf("http://127.0.0.1:%d/", servingPort)
	fmt.Printf("queue-proxy benchmark: %s, %d connections, %v per path after %v warm-up, concurrency %d, %d CPUs\n\n",
		time.Now().UTC().Format(time.DateOnly), conns, duration, warmup, concurrency, runtime.NumCPU())
	fmt.Println("| scenario | path | throughput (req/s) | p50 | p90 | p99 | errors | queue-proxy CPU per request |")
	fmt.Println("|---|---|---|---|---|---|---|---|")

	var scenarios []float64
	for _, s := range strings.Split(rateList, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("-rates: %w", err)
		}
		scenarios = append(scenarios, r)
	}
	scenarios = append(scenarios, 0) // maximum throughput, closed loop
	var summary []string
	for _, rate := range scenarios {
		name := "max throughput"
		if rate > 0 {
			name = fmt.Sprintf("%.0f req/s", rate)
		}
		o := loadgen.Options{Rate: rate, Connections: conns, Duration: duration, Warmup: warmup}
		o.URL = direct
		d, err := loadgen.Run(ctx, o)
		if err != nil {
			return err
		}
		row(name, "direct", d, "")
		o.URL = proxied
		cpu0, err := cpuTime(qp.Process.Pid)
		if err != nil {
			return err
		}
		p, err := loadgen.Run(ctx, o)
		if err != nil {
			return err
		}
		cpu1, err := cpuTime(qp.Process.Pid)
		if err != nil {
			return err
		}
		// Warm-up requests are in the CPU time too: count them in.
		total := float64(p.Requests) * float64(duration+warmup) / float64(duration)
		perReq := time.Duration(float64(cpu1-cpu0) / total)
		row(name, "queue-proxy", p, fmt.Sprintf("%.1f µs", float64(perReq)/1e3))
		summary = append(summary, fmt.Sprintf("- %s: throughput ratio %.2f; added latency p50 %s, p90 %s, p99 %s",
			name, p.Throughput/d.Throughput, diff(p.Latency.P50, d.Latency.P50), diff(p.Latency.P90, d.Latency.P90), diff(p.Latency.P99, d.Latency.P99)))
	}
	fmt.Println()
	fmt.Println(strings.Join(summary, "\n"))
	return nil
}

func row(scenario, path string, r loadgen.Result, cpu string) {
	fmt.Printf("| %s | %s | %.0f | %s | %s | %s | %d | %s |\n", scenario, path, r.Throughput,
		ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), r.Errors+r.Requests-r.Codes[200], cpu)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

func diff(a, b time.Duration) string { return fmt.Sprintf("%+.3f ms", float64(a-b)/1e6) }

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return errors.New("queue-proxy did not become ready within 30s")
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// cpuTime is the user+system CPU time a process has used, from /proc.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}
