// Package pgstorm loads PostgreSQL from many goroutines at once: ?workers=
// goroutines (default 4, at most 16) for ?seconds= (default 5, at most 60)
// each run INSERT, COUNT and MAX statements in random order with small
// random pauses, on a pgxpool of one connection per worker. It answers how
// many operations succeeded and failed and the rate.
//
// It connects with the standard PG* variables (PGHOST, PGPORT, PGUSER,
// PGDATABASE, PGPASSWORD; defaults 127.0.0.1, 5432, postgres, postgres) and
// creates its table when it is missing. A Go handler answers an error as
// 500, so bad input and an unreachable server are a 500 with {"error": ...}
// naming the problem. Keep the instances × workers under the server's
// max_connections (100 by default).
//
// It has a go.mod of its own to pin pgx: the platform builds it with the
// versions in go.mod and go.sum, from the module cache when they are there.
package pgstorm

import (
	"context"
	"crypto/rand"
	"fmt"
	randv2 "math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"sless.dev/sless/runtimes/go/sless"
)

const (
	maxWorkers = 16
	maxSeconds = 60
	// maxPause is the longest random pause between two operations.
	maxPause = 5 * time.Millisecond
)

// createTable runs in one transaction: the advisory lock makes concurrent
// first calls take turns, since two sessions creating the same table at
// once can collide in the catalog.
const createTable = `
SELECT pg_advisory_xact_lock(hashtext('stress_go_pgstorm'));
CREATE TABLE IF NOT EXISTS stress_go_pgstorm (
	id bigserial PRIMARY KEY,
	run text NOT NULL,
	worker integer NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stress_go_pgstorm_run ON stress_go_pgstorm (run);`

// Result is the answer: what ran, for how long, and how it went.
type Result struct {
	Workers      int              `json:"workers"`
	Seconds      int              `json:"seconds"`
	Elapsed      float64          `json:"elapsedSeconds"`
	OK           int64            `json:"ok"`
	Errors       int64            `json:"errors"`
	OpsPerSecond float64          `json:"opsPerSecond"`
	ByOperation  map[string]int64 `json:"byOperation"` // successful operations by kind
	FirstError   string           `json:"firstError,omitempty"`
	Run          string           `json:"run"` // the rows this call inserted carry it
	Server       string           `json:"server"`
}

// Handle runs one storm and answers its Result.
func Handle(ctx context.Context, e sless.Event) (any, error) {
	workers, err := intParam(e.Query, "workers", 4, 1, maxWorkers)
	if err != nil {
		return nil, err
	}
	seconds, err := intParam(e.Query, "seconds", 5, 1, maxSeconds)
	if err != nil {
		return nil, err
	}
	cfg, server, err := poolConfig(int32(workers))
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %w", server, err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s is unreachable: %w", server, err)
	}
	if _, err := pool.Exec(ctx, createTable); err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: create table stress_go_pgstorm: %w", server, err)
	}
	r := storm(ctx, pool, workers, time.Duration(seconds)*time.Second)
	r.Seconds, r.Server = seconds, server
	return r, nil
}

// poolConfig reads the PG* variables, with the sample's defaults, into a
// pool of n connections; PGPASSWORD is read by pgx itself.
func poolConfig(n int32) (*pgxpool.Config, string, error) {
	server := net.JoinHostPort(getenv("PGHOST", "127.0.0.1"), getenv("PGPORT", "5432"))
	u := url.URL{Scheme: "postgres", User: url.User(getenv("PGUSER", "postgres")), Host: server,
		Path: "/" + getenv("PGDATABASE", "postgres"), RawQuery: "connect_timeout=5"}
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("PostgreSQL settings from PG* variables: %w", err)
	}
	cfg.MaxConns = n
	return cfg, server, nil
}

func getenv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func intParam(query map[string]string, name string, fallback, lo, hi int) (int, error) {
	raw, ok := query[name]
	if !ok {
		return fallback, nil
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s must be an integer between %d and %d, not %q", name, lo, hi, raw)
	}
	return v, nil
}

// tally is the storm's shared count.
type tally struct {
	ok, failed atomic.Int64
	byOp       [3]atomic.Int64
	firstErr   sync.Once
	first      string
}

var operations = [3]string{"insert", "count", "max"}

// storm runs the workers until d has passed or ctx ends.
func storm(ctx context.Context, pool *pgxpool.Pool, workers int, d time.Duration) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	run := rand.Text()
	var t tally
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() { work(ctx, pool, run, w, &t) })
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	r := Result{Workers: workers, Elapsed: elapsed, OK: t.ok.Load(), Errors: t.failed.Load(),
		ByOperation: map[string]int64{}, FirstError: t.first, Run: run}
	for i, name := range operations {
		r.ByOperation[name] = t.byOp[i].Load()
	}
	r.OpsPerSecond = float64(r.OK) / elapsed
	return r
}

// work runs random operations with random pauses until ctx ends. An
// operation cut short by the end of the storm is not counted.
func work(ctx context.Context, pool *pgxpool.Pool, run string, worker int, t *tally) {
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		op := randv2.IntN(len(operations))
		var err error
		var n int64
		switch operations[op] {
		case "insert":
			_, err = pool.Exec(ctx, "INSERT INTO stress_go_pgstorm (run, worker) VALUES ($1, $2)", run, worker)
		case "count":
			err = pool.QueryRow(ctx, "SELECT count(*) FROM stress_go_pgstorm WHERE run = $1", run).Scan(&n)
		case "max":
			err = pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM stress_go_pgstorm").Scan(&n)
		}
		switch {
		case ctx.Err() != nil && err != nil:
			return
		case err != nil:
			t.failed.Add(1)
			t.firstErr.Do(func() { t.first = err.Error() })
		default:
			t.ok.Add(1)
			t.byOp[op].Add(1)
		}
		pause.Reset(randv2.N(maxPause))
	}
}
