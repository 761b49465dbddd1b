// Command bench-records measures the PostgreSQL invocation store on the
// local server, each figure against a floor measured in the same run:
//
//   - the sustained record rate of Store against a bare pgx CopyFrom loop
//     of the same rows, in the same batches, into the same table;
//   - the request path's latency at a fixed rate through an activator whose
//     records go to PostgreSQL, against the same activator with the ring;
//   - the summary query over 10 million records for a one-hour window.
//
// Each runs in a database of its own, dropped at the end. It prints
// Markdown for benchmarks/RESULTS.md.
//
//	go run ./benchmarks/cmd/bench-records [-records 300000] [-rounds 3] [-summary-records 10000000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.dev/sless/activator"
	"sless.dev/sless/benchmarks/benchdb"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/invocation"
	"sless.dev/sless/invocation/postgres"
	"sless.dev/sless/load"
)

func main() {
	var (
		server   = flag.String("server", benchdb.DefaultServer, "the PostgreSQL server's admin URL")
		records  = flag.Int("records", 300_000, "records per throughput measurement")
		rounds   = flag.Int("rounds", 3, "measurements of each, taken in turn; medians are shown")
		rate     = flag.Float64("rate", 1000, "requests/s for the request-path measurement")
		duration = flag.Duration("duration", 10*time.Second, "measured time per request-path run")
		summary  = flag.Int("summary-records", 10_000_000, "records in the table the summary query reads (0: skip)")
	)
	flag.Parse()
	ctx := context.Background()
	if err := run(ctx, *server, *records, *rounds, *rate, *duration, *summary); err != nil {
		fmt.Fprintln(os.Stderr, "bench-records:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, server string, n, rounds int, rate float64, duration time.Duration, summaryN int) error {
	var store, bare []float64
	for range rounds {
		s, err := benchdb.With(ctx, server, func(url string) (float64, error) { return storeRate(ctx, url, n) })
		if err != nil {
			return err
		}
		b, err := benchdb.With(ctx, server, func(url string) (float64, error) { return bareRate(ctx, url, n) })
		if err != nil {
			return err
		}
		store, bare = append(store, s), append(bare, b)
	}
	fmt.Printf("| records/s (%d records, median of %d) | Store.Add | bare CopyFrom | ratio |\n|---|---|---|---|\n", n, rounds)
	fmt.Printf("| sustained | %.0f | %.0f | %.2f× |\n\n", median(store), median(bare), median(store)/median(bare))

	var ring, pg []load.Result
	for range rounds {
		r, err := requestPath(ctx, "", rate, duration)
		if err != nil {
			return err
		}
		var p load.Result
		if _, err := benchdb.With(ctx, server, func(url string) (float64, error) {
			p, err = requestPath(ctx, url, rate, duration)
			return 0, err
		}); err != nil {
			return err
		}
		ring, pg = append(ring, r), append(pg, p)
	}
	fmt.Printf("| activator at %.0f req/s (median of %d; range: lowest–highest round, the run-to-run noise) | p50 | range | p99 | range | errors |\n|---|---|---|---|---|---|\n", rate, rounds)
	p50 := func(l load.Latency) time.Duration { return l.P50 }
	p99 := func(l load.Latency) time.Duration { return l.P99 }
	for _, row := range []struct {
		name string
		rs   []load.Result
	}{{"records in the ring", ring}, {"records in PostgreSQL", pg}} {
		fmt.Printf("| %s | %s | %s | %s | %s | %d |\n", row.name, medianLatency(row.rs, p50), latencyRange(row.rs, p50),
			medianLatency(row.rs, p99), latencyRange(row.rs, p99), sumErrors(row.rs))
	}
	fmt.Println()
	if summaryN > 0 {
		if _, err := benchdb.With(ctx, server, func(url string) (float64, error) { return 0, summaryTime(ctx, url, summaryN, rounds) }); err != nil {
			return err
		}
	}
	return nil
}

func records(n int) []invocation.Record {
	start := time.Now()
	out := make([]invocation.Record, n)
	for i := range out {
		out[i] = invocation.Record{Namespace: "bench", Function: "fn", Trigger: "http", Status: 200,
			Start: start.Add(time.Duration(i) * time.Microsecond), Duration: time.Millisecond, BytesIn: 0, BytesOut: 13,
			Instance: "10.0.0.1:8012", RequestID: fmt.Sprintf("bench-%d", i)}
	}
	return out
}

// storeRate is the rate at which the store takes n records added at once.
func storeRate(ctx context.Context, url string, n int) (float64, error) {
	reg := prometheus.NewRegistry()
	s, err := postgres.Open(ctx, url, reg, postgres.Options{Buffer: n})
	if err != nil {
		return 0, err
	}
	defer s.Start()()
	rs := records(n)
	start := time.Now()
	for _, r := range rs {
		s.Add(r)
	}
	for written(reg) < float64(n) {
		if time.Since(start) > 5*time.Minute {
			return 0, errors.New("the store did not write the records within 5 minutes")
		}
		time.Sleep(time.Millisecond)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func written(reg *prometheus.Registry) float64 {
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "sless_invocation_records_written_total" {
			return f.Metric[0].GetCounter().GetValue()
		}
	}
	return 0
}

// bareRate is the floor: the same rows copied by pgx alone, in the
// store's batch size, into the table the store's migrations make.
func bareRate(ctx context.Context, url string, n int) (float64, error) {
	s, err := postgres.Open(ctx, url, prometheus.NewRegistry(), postgres.Options{})
	if err != nil {
		return 0, err
	}
	s.Close() // the schema and partitions are what is needed
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	rs := records(n)
	cols := []string{"started_at", "namespace", "function", "trigger", "trigger_name", "status",
		"duration_ns", "queue_wait_ns", "cold_start", "cold_start_wait_ns", "bytes_in", "bytes_out",
		"instance", "request_id", "error"}
	start := time.Now()
	for i := 0; i < n; i += postgres.DefaultBatchSize {
		batch := rs[i:min(i+postgres.DefaultBatchSize, n)]
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"sless_invocations"}, cols, pgx.CopyFromSlice(len(batch), func(j int) ([]any, error) {
			r := &batch[j]
			return []any{r.Start, r.Namespace, r.Function, r.Trigger, r.TriggerName, int16(r.Status), int64(r.Duration),
				int64(r.QueueWait), r.ColdStart, int64(r.ColdStartWait), int64(r.BytesIn), int64(r.BytesOut), r.Instance, r.RequestID, r.Error}, nil
		}))
		if err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// requestPath loads an in-process activator in front of a hello server at
// rate, its records in PostgreSQL at url, or in the ring when url is empty.
func requestPath(ctx context.Context, url string, rate float64, duration time.Duration) (load.Result, error) {
	hello, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return load.Result{}, err
	}
	go http.Serve(hello, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello, world\n") })) //nolint:errcheck
	defer hello.Close()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	var sink interface {
		invocation.Sink
		activator.RecordReader
	} = invocation.NewRing(10_000)
	if url != "" {
		s, err := postgres.Open(ctx, url, reg, postgres.Options{})
		if err != nil {
			return load.Result{}, err
		}
		defer s.Start()()
		sink = s
	}
	a, err := activator.New(activator.Config{}, hops.NopPoker{}, sink, reg, log)
	if err != nil {
		return load.Result{}, err
	}
	a.SetFunction(activator.RouteSpec{Namespace: "bench", Name: "fn", HTTP: true, Timeout: time.Minute})
	a.SetEndpoints("bench", "fn", []string{hello.Addr().String()})
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	srv := &activator.Server{Activator: a, DrainTimeout: time.Second, Log: log,
		Admin: activator.AdminServer{Activator: a, Registry: reg, Records: sink, Log: log}}
	go func() { served <- srv.Run(srvCtx, serving, admin) }()
	defer func() { stop(); <-served }()
	res, err := load.Run(ctx, load.Options{URL: "http://" + serving.Addr().String() + "/fn/bench/fn/",
		Rate: rate, Connections: 64, Duration: duration, Warmup: 2 * time.Second})
	if url != "" && testutil.ToFloat64(droppedOf(reg)) > 0 {
		return res, errors.New("records were dropped during the request-path run")
	}
	return res, err
}

func droppedOf(reg *prometheus.Registry) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "dropped"}, func() float64 {
		fams, _ := reg.Gather()
		var n float64
		for _, f := range fams {
			if f.GetName() == "sless_invocation_records_dropped_total" {
				for _, m := range f.Metric {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	})
}

// summaryTime fills the table with n records of one function over seven
// days (made by the server, generate_series) and times the one-hour
// summary.
func summaryTime(ctx context.Context, url string, n, rounds int) error {
	s, err := postgres.Open(ctx, url, prometheus.NewRegistry(), postgres.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	now := time.Now().UTC()
	for d := 7; d >= 2; d-- { // the days the store's maintenance did not make
		day := now.Truncate(24*time.Hour).AddDate(0, 0, -d)
		sql := fmt.Sprintf("create table if not exists sless_invocations_p%s partition of sless_invocations for values from ('%s') to ('%s')",
			day.Format("20060102"), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := conn.Exec(ctx, sql); err != nil {
			return err
		}
	}
	fill := time.Now()
	_, err = conn.Exec(ctx, `insert into sless_invocations (started_at, namespace, function, trigger, trigger_name, status,
		duration_ns, queue_wait_ns, cold_start, cold_start_wait_ns, bytes_in, bytes_out, instance, request_id, error)
		select $1::timestamptz - (i * (7 * 86400.0 / $2)) * interval '1 second', 'bench', 'fn',
			(array['http','cron','rabbitmq'])[1 + i % 3], '', (array[200,200,200,502])[1 + i % 4],
			(random() * 1e8)::bigint, 0, i % 100 = 0, (random() * 1e9)::bigint, 0, 13, '10.0.0.1:8012', 'r' || i, ''
		from generate_series(1, $2) i`, now, n)
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if _, err := conn.Exec(ctx, "analyze sless_invocations"); err != nil {
		return err
	}
	filled := time.Since(fill)
	var times []float64
	var sum invocation.Summary
	for range rounds + 1 { // the first warms the cache
		start := time.Now()
		if sum, err = s.Summary(ctx, "bench", "fn", now.Add(-time.Hour)); err != nil {
			return err
		}
		times = append(times, time.Since(start).Seconds()*1000)
	}
	fmt.Printf("| summary, 1 h window of %d records over 7 days (%d in the window; filled in %s) | median of %d |\n|---|---|\n",
		n, sum.Total.Count, filled.Round(time.Second), rounds)
	fmt.Printf("| query time | %.1f ms |\n\n", median(times[1:]))
	return nil
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func medianLatency(rs []load.Result, f func(load.Latency) time.Duration) time.Duration {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = f(r.Latency)
	}
	slices.Sort(ds)
	return ds[len(ds)/2].Round(time.Microsecond)
}

// latencyRange is the lowest and the highest of the rounds.
func latencyRange(rs []load.Result, f func(load.Latency) time.Duration) string {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = f(r.Latency)
	}
	return fmt.Sprintf("%v–%v", slices.Min(ds).Round(time.Microsecond), slices.Max(ds).Round(time.Microsecond))
}

func sumErrors(rs []load.Result) int64 {
	var n int64
	for _, r := range rs {
		n += r.Errors
		for code, c := range r.Codes {
			if code != 200 {
				n += c
			}
		}
	}
	return n
}
