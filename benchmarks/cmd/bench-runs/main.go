// Command bench-runs measures runs (asynchronous invocations) on the
// local PostgreSQL, each figure against a floor measured in the same run:
//
//   - runs accepted per second through an activator (Prefer:
//     respond-async, answered 202 once committed) against a bare
//     INSERT-and-commit loop of the same rows into the same table, with as
//     many connections as the store has;
//   - a run's time from its submission to its end, read by a client
//     waiting on GET /runs/{id}?wait=, against the same request waited on,
//     one at a time, through the same activator to the same instance;
//   - runs queued at a function at zero (no instance), then drained once
//     an instance comes, nothing lost (each accepted run succeeded, its
//     instance saw it exactly once), against the same requests waited on
//     by as many clients as the function's runs concurrency; with the
//     cost of the dispatcher's look (Pending) at that backlog against
//     its cost with one run.
//
// Each measurement runs in a database of its own, dropped at the end. It
// prints Markdown for benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-runs [-runs 20000] [-clients 32] [-latency 1000] [-rounds 3] [-drain 100000] [-drain-rounds 1]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/benchmarks/benchdb"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/invocation"
	"sless.dev/sless/runs"
	runspg "sless.dev/sless/runs/postgres"
)

func main() {
	var (
		server  = flag.String("server", benchdb.DefaultServer, "the PostgreSQL server's admin URL")
		n       = flag.Int("runs", 20_000, "runs submitted per throughput measurement")
		clients = flag.Int("clients", 32, "concurrent submitters")
		latency = flag.Int("latency", 1000, "runs and requests, one at a time, per latency measurement")
		rounds  = flag.Int("rounds", 3, "measurements of each, taken in turn; medians are shown")
		drain   = flag.Int("drain", 100_000, "runs queued at zero, then drained (0: the drain is not measured)")
		drainR  = flag.Int("drain-rounds", 1, "measurements of the drain and its floor; medians are shown")
		within  = flag.Duration("drain-timeout", time.Hour, "the longest a drain may take before it counts as failed")
		profile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	)
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-runs:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	err := run(ctx, *server, *n, *clients, *latency, *rounds)
	if err == nil && *drain > 0 {
		err = runDrain(ctx, *server, *drain, *clients, *drainR, *within)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-runs:", err)
		os.Exit(1) //nolint:gocritic // the profile of a failed run is not wanted
	}
}

func run(ctx context.Context, server string, n, clients, latency, rounds int) error {
	if rounds == 0 {
		return nil
	}
	var accepted, bare []float64
	var sync50, async50, sync99, async99 []time.Duration
	for range rounds {
		a, err := benchdb.With(ctx, server, func(url string) (float64, error) { return acceptRate(ctx, url, n, clients) })
		if err != nil {
			return fmt.Errorf("accepted runs: %w", err)
		}
		b, err := benchdb.With(ctx, server, func(url string) (float64, error) { return bareRate(ctx, url, n) })
		if err != nil {
			return fmt.Errorf("bare inserts: %w", err)
		}
		accepted, bare = append(accepted, a), append(bare, b)
		l, err := benchdb.With(ctx, server, func(url string) (latencies, error) { return measureLatency(ctx, url, latency) })
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		sync50, async50 = append(sync50, hops.Pct(l.sync, 50)), append(async50, hops.Pct(l.async, 50))
		sync99, async99 = append(sync99, hops.Pct(l.sync, 99)), append(async99, hops.Pct(l.async, 99))
	}
	fmt.Printf("| runs/s (%d runs, %d clients, %d connections; median of %d) | accepted through the activator | bare INSERT and commit | ratio |\n|---|---|---|---|\n",
		n, clients, storeConns, rounds)
	fmt.Printf("| sustained | %.0f | %.0f | %.2f× |\n\n", median(accepted), median(bare), median(accepted)/median(bare))
	fmt.Printf("| one at a time (%d each; median of %d) | p50 | p99 |\n|---|---|---|\n", latency, rounds)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	fmt.Printf("| request waited on | %s | %s |\n", r(median(sync50)), r(median(sync99)))
	fmt.Printf("| run, submission to its end read with ?wait= | %s | %s |\n", r(median(async50)), r(median(async99)))
	fmt.Printf("| added by the run | %s | %s |\n\n", r(median(async50)-median(sync50)), r(median(async99)-median(sync99)))
	return nil
}

// storeConns is the connections of the run store, and of the bare loop.
const storeConns = 4

var quiet = slog.New(slog.DiscardHandler)

// runsConcurrency is bench/fn's async.concurrency: the runs an activator
// attempts at once, and the clients of the drain's floor.
const runsConcurrency = 100

// fnTimeout is bench/fn's timeout: the runs the dispatcher claims while
// the function is at zero wait that long for an instance, through the
// whole of the drain's submissions, before their attempt fails (504).
const fnTimeout = 10 * time.Minute

// platform is an activator on loopback taking runs into PostgreSQL, with
// function bench/fn on the instance at instance ("" for none: at zero,
// until its activator is given one).
type platform struct {
	base      string
	store     *runspg.Store
	activator *activator.Activator
	stop      func()
}

func start(ctx context.Context, url, instance string, dispatch bool) (*platform, error) {
	store, err := runspg.Open(ctx, url, runspg.Options{MaxConns: storeConns, Log: quiet})
	if err != nil {
		return nil, err
	}
	a, err := activator.New(activator.Config{}, hops.NopPoker{}, invocation.NewRing(1000), prometheus.NewRegistry(), quiet)
	if err != nil {
		store.Close()
		return nil, err
	}
	a.EnableRuns(store, activator.RunsConfig{})
	a.SetFunction(activator.RouteSpec{Namespace: "bench", Name: "fn", HTTP: true, Timeout: fnTimeout,
		Runs: runs.Policy{MaxAttempts: 1, MaxAge: time.Hour, Concurrency: runsConcurrency}})
	if instance != "" {
		a.SetEndpoints("bench", "fn", []string{instance})
	}
	serving, err1 := net.Listen("tcp", "127.0.0.1:0")
	admin, err2 := net.Listen("tcp", "127.0.0.1:0")
	if err := errors.Join(err1, err2); err != nil {
		store.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		srv := &activator.Server{Activator: a, DrainTimeout: time.Second, Log: quiet,
			Admin: activator.AdminServer{Activator: a, Registry: prometheus.NewRegistry(), Log: quiet}}
		_ = srv.Run(sctx, serving, admin)
	})
	if dispatch {
		wg.Go(func() { a.Dispatch(sctx) })
	}
	base := "http://" + serving.Addr().String()
	if err := hops.WaitOK(ctx, "http://"+admin.Addr().String()+"/readyz", nil, 10*time.Millisecond, 10*time.Second); err != nil {
		cancel()
		wg.Wait()
		store.Close()
		return nil, err
	}
	return &platform{base: base, store: store, activator: a, stop: func() { cancel(); wg.Wait(); store.Close() }}, nil
}

// acceptRate is the rate at which n runs are accepted, from clients
// submitting at once; none is attempted.
func acceptRate(ctx context.Context, url string, n, clients int) (float64, error) {
	p, err := start(ctx, url, "", false)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	return rate(n, clients, func() error {
		_, err := submitID(client, p.base+"/fn/bench/fn/orders", `{"order": 42}`)
		return err
	})
}

// rate is how many times a second workers at once do op, n times in all;
// the first error ends it.
func rate(n, workers int, op func() error) (float64, error) {
	var left atomic.Int64
	left.Store(int64(n))
	errs := make(chan error, workers)
	begin := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := op(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds(), nil
}

func submitID(client *http.Client, url, body string) (runs.ID, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Prefer", runs.PreferAsync)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a runs.Accepted
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&a) != nil {
		return "", fmt.Errorf("a submission answered %s", resp.Status)
	}
	return a.ID, nil
}

// bareRate is the floor: the rows the activator stores, each inserted and
// committed on its own by pgx alone, from as many connections as the
// store has, into the table its migrations make.
func bareRate(ctx context.Context, url string, n int) (float64, error) {
	s, err := runspg.Open(ctx, url, runspg.Options{Log: quiet})
	if err != nil {
		return 0, err
	}
	s.Close() // the schema and partitions are what is needed
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns="+fmt.Sprint(storeConns))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	header := []byte(`[["Content-Type","application/json"],["X-Forwarded-For","127.0.0.1"],["X-Request-Id","bench"]]`)
	return rate(n, storeConns, func() error {
		at := time.Now()
		_, err := pool.Exec(ctx, `insert into sless_runs (id, namespace, function, state, created_at,
			not_before, expires_at, method, path, header, body) values ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10)`,
			runs.NewID(), "bench", "fn", runs.Queued, at, at.Add(time.Hour), "POST", "/orders", header, []byte(`{"order": 42}`))
		return err
	})
}

type latencies struct{ sync, async []time.Duration }

// measureLatency sends n requests waited on, then n runs each followed to
// its end, one at a time, to an instance answering at once.
func measureLatency(ctx context.Context, url string, n int) (latencies, error) {
	var l latencies
	inst, err := startInstance()
	if err != nil {
		return l, err
	}
	defer inst.close()
	p, err := start(ctx, url, inst.addr, true)
	if err != nil {
		return l, err
	}
	defer p.stop()
	client := &http.Client{}
	target := p.base + "/fn/bench/fn/"
	for i := range n + n/10 { // the first tenth warms up
		begin := time.Now()
		if err := postOK(client, target, "x"); err != nil {
			return l, err
		}
		if i >= n/10 {
			l.sync = append(l.sync, time.Since(begin))
		}
	}
	for i := range n + n/10 {
		begin := time.Now()
		id, err := submitID(client, target, "x")
		if err != nil {
			return l, err
		}
		r, err := awaitEnd(client, p.base+runs.Path+string(id))
		if err != nil {
			return l, err
		}
		if r.State != runs.Succeeded {
			return l, fmt.Errorf("run %s ended %s: %s", id, r.State, r.Error)
		}
		if i >= n/10 {
			l.async = append(l.async, time.Since(begin))
		}
	}
	return l, nil
}

// postOK sends a request waited on, and reads its answer, an error
// unless 200.
func postOK(client *http.Client, url, body string) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("a request answered %s", resp.Status)
	}
	return nil
}

// awaitEnd reads a run with ?wait= until it ended.
func awaitEnd(client *http.Client, url string) (runs.Run, error) {
	for {
		var r runs.Run
		resp, err := client.Get(url + "?wait=30s")
		if err != nil {
			return r, err
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || r.State.Ended() {
			return r, err
		}
	}
}

func median[T float64 | time.Duration](xs []T) T {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
