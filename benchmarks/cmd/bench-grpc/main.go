// Command bench-grpc measures what sless costs a gRPC function: the same
// function process (a Go function as the Go runtime serves it: net/http in
// HTTP/1.1 and h2c, a *grpc.Server as its handler) is called with unary
// calls directly, through a plain TCP relay process (the floor), through a
// `sless queue-proxy` process, through an activator in front of it, and,
// given -knative, through Knative Serving's queue-proxy (built by `make
// bench-knative`), which speaks h2c too. Each client keeps one HTTP/2
// connection, as gRPC clients do, and -streams calls in flight on it. With
// -rounds N the paths are measured N times in turn and each compared with
// the direct run of its own round. It prints a Markdown table for
// benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-grpc -sless bin/sless [-knative bin/knative/queue] [-rounds 3]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"sless.dev/sless/benchmarks/hops"
)

const functionEnv = "BENCH_GRPC_PORT"

func main() {
	if port := os.Getenv(functionEnv); port != "" {
		serveFunction(port)
		return
	}
	hops.RunIfChild()
	var (
		slessBin = flag.String("sless", "bin/sless", "the sless binary that runs the queue-proxy")
		knative  = flag.String("knative", "", "Knative's queue-proxy binary, to measure beside sless's (it binds 9090, 9091)")
		duration = flag.Duration("duration", 10*time.Second, "measured time per path")
		warmup   = flag.Duration("warmup", 2*time.Second, "unmeasured time before each measurement")
		streams  = flag.Int("streams", 64, "calls in flight at once, on one connection")
		rounds   = flag.Int("rounds", 1, "measurements of each path, taken in turn; the table shows medians")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *slessBin, *knative, *duration, *warmup, *streams, max(*rounds, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "bench-grpc:", err)
		os.Exit(1)
	}
}

// service answers UnaryCall with its payload.
type service struct {
	testgrpc.UnimplementedTestServiceServer
}

func (service) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: in.GetPayload()}, nil
}

// serveFunction is the function process, as the Go runtime serves a gRPC
// function: health checks, and the gRPC server as the handler of gRPC
// calls.
func serveFunction(port string) {
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, service{})
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Addr: "127.0.0.1:" + port, Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Health checks: sless's GET /healthz, Knative's GET / (its
		// queue-proxy's probe of the user container).
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			_, _ = io.WriteString(w, "ok")
			return
		}
		g.ServeHTTP(w, r)
	})}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

// path is one way to the function.
type path struct {
	name, addr, authority string
	procs                 []*exec.Cmd // the proxies, whose CPU time is measured
}

// sample is one measurement of one path.
type sample struct {
	throughput float64
	p50, p99   time.Duration
	errors     int
	cpu        time.Duration // the proxies' CPU time per call
}

func run(ctx context.Context, slessBin, knativeBin string, duration, warmup time.Duration, streams, rounds int) error {
	ports, err := hops.FreePorts(8)
	if err != nil {
		return err
	}
	user, serving, admin, act, actAdmin, relay, knServing, knTLS := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6], ports[7]
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := func(env string) *exec.Cmd {
		c := exec.Command(self)
		c.Env, c.Stderr = append(os.Environ(), env), os.Stderr
		return c
	}
	fn := child(fmt.Sprintf("%s=%d", functionEnv, user))
	qp := exec.Command(slessBin, "queue-proxy")
	qp.Env = append(os.Environ(), "SLESS_FUNCTION=bench", "SLESS_NAMESPACE=bench", "SLESS_USER_PROTOCOL=h2c",
		"SLESS_USER_PORT="+strconv.Itoa(user), "SLESS_SERVING_PORT="+strconv.Itoa(serving),
		"SLESS_ADMIN_PORT="+strconv.Itoa(admin), "SLESS_DRAIN_SECONDS=1")
	ac := child(hops.ActivatorEnv(act, actAdmin, serving))
	rel := child(hops.RelayEnv(relay, user))
	procs := []*exec.Cmd{fn, qp, ac, rel}
	at := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	paths := []path{
		{name: "direct", addr: at(user)},
		{name: "TCP relay (floor)", addr: at(relay), procs: []*exec.Cmd{rel}},
		{name: "sless queue-proxy", addr: at(serving), procs: []*exec.Cmd{qp}},
		{name: "sless activator + queue-proxy", addr: at(act), authority: "bench.bench." + hops.Domain, procs: []*exec.Cmd{ac, qp}},
	}
	if knativeBin != "" {
		kn := exec.Command(knativeBin)
		kn.Env = append(os.Environ(), "CONTAINER_CONCURRENCY=0",
			"QUEUE_SERVING_PORT="+strconv.Itoa(knServing), "QUEUE_SERVING_TLS_PORT="+strconv.Itoa(knTLS),
			"USER_PORT="+strconv.Itoa(user), "REVISION_TIMEOUT_SECONDS=300",
			"SERVING_LOGGING_CONFIG=", "SERVING_LOGGING_LEVEL=error",
			"SERVING_NAMESPACE=bench", "SERVING_CONFIGURATION=bench", "SERVING_REVISION=bench",
			"SERVING_POD=bench", "SERVING_POD_IP=127.0.0.1")
		kn.Stderr = os.Stderr
		procs = append(procs, kn)
		paths = append(paths, path{name: "Knative queue-proxy", addr: at(knServing), procs: []*exec.Cmd{kn}})
	}
	for _, c := range procs {
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", c.Path, err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	for _, url := range []string{"http://" + at(admin) + "/readyz", "http://" + at(actAdmin) + "/readyz"} {
		if err := hops.WaitOK(ctx, url, nil, 10*time.Millisecond, 30*time.Second); err != nil {
			return err
		}
	}
	if knativeBin != "" {
		probe := http.Header{"K-Network-Probe": {"queue"}}
		if err := hops.WaitOK(ctx, "http://"+at(knServing)+"/", probe, 10*time.Millisecond, 30*time.Second); err != nil {
			return err
		}
	}
	runs := make([][]sample, len(paths))
	for range rounds {
		for i, p := range paths {
			s, err := p.measure(ctx, streams, duration, warmup)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			runs[i] = append(runs[i], s)
		}
	}
	fmt.Printf("gRPC unary calls: %s, one connection, %d streams, %v per path after %v warm-up, %d rounds, %d CPUs\n\n",
		time.Now().UTC().Format(time.DateOnly), streams, duration, warmup, rounds, runtime.NumCPU())
	fmt.Println("| path | calls/s | p50 | p99 | errors | proxies' CPU per call | throughput vs direct | vs the relay |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for i, p := range paths {
		ratio := func(base int) string {
			vals := make([]float64, rounds)
			for r := range rounds {
				vals[r] = runs[i][r].throughput / runs[base][r].throughput
			}
			slices.Sort(vals)
			return fmt.Sprintf("%.2f×", vals[len(vals)/2])
		}
		var errs int
		for _, s := range runs[i] {
			errs += s.errors
		}
		cpu, vsRelay := "", ""
		if len(p.procs) > 0 {
			cpu = fmt.Sprintf("%.1f µs", float64(med(runs[i], func(s sample) float64 { return float64(s.cpu) }))/1e3)
		}
		if i > 1 {
			vsRelay = ratio(1)
		}
		fmt.Printf("| %s | %.0f | %.3f ms | %.3f ms | %d | %s | %s | %s |\n", p.name,
			med(runs[i], func(s sample) float64 { return s.throughput }),
			med(runs[i], func(s sample) float64 { return float64(s.p50) })/1e6,
			med(runs[i], func(s sample) float64 { return float64(s.p99) })/1e6, errs, cpu, ratio(0), vsRelay)
	}
	return nil
}

func med(runs []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(runs))
	for i, r := range runs {
		vals[i] = f(r)
	}
	slices.Sort(vals)
	return vals[len(vals)/2]
}

// measure calls the path's function from streams goroutines on one
// connection, for warmup and then duration, and takes the measured part.
func (p path) measure(ctx context.Context, streams int, duration, warmup time.Duration) (sample, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if p.authority != "" {
		opts = append(opts, grpc.WithAuthority(p.authority))
	}
	conn, err := grpc.NewClient("passthrough:///"+p.addr, opts...)
	if err != nil {
		return sample{}, err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(strings.Repeat("x", 64))}}
	if _, err := client.UnaryCall(ctx, req); err != nil {
		return sample{}, fmt.Errorf("first call: %w", err)
	}
	cpu0, err := p.cpuTime()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	lat := make([][]time.Duration, streams)
	errs := make([]int, streams)
	var calls int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			n := 0
			for t := time.Now(); t.Before(end) && ctx.Err() == nil; t = time.Now() {
				_, err := client.UnaryCall(ctx, req)
				n++
				if !t.Before(measureFrom) {
					if err != nil {
						errs[i]++
					} else {
						lat[i] = append(lat[i], time.Since(t))
					}
				}
			}
			mu.Lock()
			calls += n
			mu.Unlock()
		})
	}
	wg.Wait()
	cpu1, err := p.cpuTime()
	if err != nil {
		return sample{}, err
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return sample{}, errors.New("no call succeeded")
	}
	s := sample{throughput: float64(len(all)) / duration.Seconds(), p50: hops.Pct(all, 50), p99: hops.Pct(all, 99)}
	for _, e := range errs {
		s.errors += e
	}
	if calls > 0 {
		s.cpu = (cpu1 - cpu0) / time.Duration(calls)
	}
	return s, nil
}

// cpuTime is the CPU time of the path's proxies.
func (p path) cpuTime() (time.Duration, error) {
	var total time.Duration
	for _, c := range p.procs {
		t, err := hops.CPUTime(c.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}
