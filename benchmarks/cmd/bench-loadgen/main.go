// Command bench-loadgen measures what `sless load` can drive: requests per
// second, and per core of its own CPU, against a trivial server, beside
// wrk and hey on the same server in the same run, closed loop, in turns.
//
//	go run ./benchmarks/cmd/bench-loadgen -sless bin/sless -hey bin/hey
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The child modes: the server, and the bare client floor.
const (
	serverEnv = "BENCH_LOADGEN_SERVER"
	bareEnv   = "BENCH_LOADGEN_BARE"
)

func main() {
	if addr := os.Getenv(serverEnv); addr != "" {
		serve(addr)
		return
	}
	if spec := os.Getenv(bareEnv); spec != "" {
		bare(spec)
		return
	}
	sless := flag.String("sless", "bin/sless", "the sless binary")
	wrk := flag.String("wrk", "wrk", "wrk (Debian's wrk)")
	hey := flag.String("hey", "bin/hey", "hey (go install github.com/rakyll/hey)")
	duration := flag.Duration("duration", 10*time.Second, "each run")
	conns := flag.Int("connections", 64, "connections of every tool")
	rounds := flag.Int("rounds", 3, "turns of every tool")
	flag.Parse()
	if err := run(*sless, *wrk, *hey, *duration, *conns, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-loadgen:", err)
		os.Exit(1)
	}
}

// serve answers every request with a short body: the floor every tool
// drives.
func serve(addr string) {
	body := []byte("ok")
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
	if err := s.ListenAndServe(addr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// bare is the floor of sless load's library: connections goroutines each
// with its own fasthttp client, sending in a loop and counting answers,
// nothing measured. spec is url,connections,duration.
func bare(spec string) {
	parts := strings.Split(spec, ",")
	conns, _ := strconv.Atoi(parts[1])
	d, _ := time.ParseDuration(parts[2])
	u := parts[0]
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range conns {
		c := &fasthttp.HostClient{Addr: strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/"), MaxConns: 1, MaxIdemponentCallAttempts: 1}
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI(u)
			n := int64(0)
			for time.Now().Before(end) {
				if c.Do(req, resp) == nil {
					n++
				}
			}
			total.Add(n)
		})
	}
	wg.Wait()
	fmt.Printf("Requests/sec: %.2f\n", float64(total.Load())/d.Seconds())
}

// measure is one run of one tool.
type measure struct {
	answers float64 // per second
	cpu     float64 // the tool's CPU, in cores
}

type tool struct {
	name string
	cmd  func(url string) *exec.Cmd
	// parse reads the answers per second from the tool's output.
	parse func(out []byte) (float64, error)
}

func run(slessBin, wrk, hey string, d time.Duration, conns, rounds int) error {
	addr, stop, err := startServer()
	if err != nil {
		return err
	}
	defer stop()
	url := "http://" + addr + "/"
	secs := strconv.Itoa(int(d.Seconds())) + "s"
	tools := []tool{
		{"sless load", func(url string) *exec.Cmd {
			return exec.Command(slessBin, "load", url, "-c", strconv.Itoa(conns), "-d", secs, "-o", "json")
		}, parseSless},
		{"bare fasthttp loop (floor)", func(url string) *exec.Cmd {
			self, _ := os.Executable()
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), bareEnv+"="+url+","+strconv.Itoa(conns)+","+d.String())
			return cmd
		}, parseRate(`Requests/sec:\s+([0-9.]+)`)},
		{"wrk", func(url string) *exec.Cmd {
			return exec.Command(wrk, "-t", "2", "-c", strconv.Itoa(conns), "-d", secs, url)
		}, parseRate(`Requests/sec:\s+([0-9.]+)`)},
		{"hey", func(url string) *exec.Cmd {
			return exec.Command(hey, "-c", strconv.Itoa(conns), "-z", secs, url)
		}, parseRate(`Requests/sec:\s+([0-9.]+)`)},
	}
	results := map[string][]measure{}
	for r := range rounds {
		for _, t := range tools {
			m, err := once(t, url)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			fmt.Fprintf(os.Stderr, "round %d: %s %.0f/s on %.2f cores\n", r+1, t.name, m.answers, m.cpu)
			results[t.name] = append(results[t.name], m)
		}
	}
	report(tools, results, conns, d, rounds)
	return nil
}

func once(t tool, url string) (measure, error) {
	cmd := t.cmd(url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return measure{}, fmt.Errorf("%v: %s", err, out.Bytes())
	}
	wall := time.Since(start)
	rate, err := t.parse(out.Bytes())
	if err != nil {
		return measure{}, err
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return measure{answers: rate, cpu: cpu.Seconds() / wall.Seconds()}, nil
}

func parseSless(out []byte) (float64, error) {
	// -o json prints the run after the summary: its last line.
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var run struct {
		Result struct {
			Throughput float64 `json:"throughput"`
			Errors     int64   `json:"errors"`
		} `json:"result"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &run); err != nil {
		return 0, fmt.Errorf("sless load's JSON: %w", err)
	}
	if run.Result.Errors > 0 {
		return 0, fmt.Errorf("%d errors", run.Result.Errors)
	}
	return run.Result.Throughput, nil
}

func parseRate(pattern string) func([]byte) (float64, error) {
	re := regexp.MustCompile(pattern)
	return func(out []byte) (float64, error) {
		m := re.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("no rate in %q", out)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
}

func startServer() (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	l.Close()
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), serverEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, stop, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("the server on %s did not start", addr)
}

func report(tools []tool, results map[string][]measure, conns int, d time.Duration, rounds int) {
	median := func(ms []measure, f func(measure) float64) float64 {
		v := make([]float64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rate := func(m measure) float64 { return m.answers }
	perCore := func(m measure) float64 { return m.answers / m.cpu }
	wrkRate, wrkPerCore := median(results["wrk"], rate), median(results["wrk"], perCore)
	fmt.Printf("closed loop, %d connections, %v a run, median of %d turns; the server is a fasthttp process of its own\n\n", conns, d, rounds)
	fmt.Println("| tool | answers/s | its CPU (cores) | answers/s per core of its CPU | rate / wrk | per core / wrk |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, t := range tools {
		ms := results[t.name]
		r, c, pc := median(ms, rate), median(ms, func(m measure) float64 { return m.cpu }), median(ms, perCore)
		fmt.Printf("| %s | %.0f | %.2f | %.0f | %.2fx | %.2fx |\n", t.name, r, c, pc, r/wrkRate, pc/wrkPerCore)
	}
}
