package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"sless.dev/sless/activator"
	"sless.dev/sless/invocation"
	"sless.dev/sless/invocation/postgres"
	"sless.dev/sless/runs"
	runspg "sless.dev/sless/runs/postgres"
)

// databaseFlags say where invocation records go: PostgreSQL, or memory.
type databaseFlags struct {
	url       string
	retention time.Duration
}

func (d *databaseFlags) register(f *pflag.FlagSet) {
	f.StringVar(&d.url, "database-url", os.Getenv("SLESS_DATABASE_URL"),
		"PostgreSQL URL for invocation records and runs (default $SLESS_DATABASE_URL; in memory when empty)")
	f.DurationVar(&d.retention, "records-retention", postgres.DefaultRetention, "how long PostgreSQL keeps invocation records (whole days)")
}

// recordStore keeps and answers invocation records.
type recordStore struct {
	invocation.Sink
	activator.RecordReader
	close func()
}

// open returns the PostgreSQL store when a URL is set, writing until
// close, or ring.
func (d *databaseFlags) open(ctx context.Context, ring *invocation.Ring, reg prometheus.Registerer, log *slog.Logger) (*recordStore, error) {
	if d.url == "" {
		return &recordStore{Sink: ring, RecordReader: ring, close: func() {}}, nil
	}
	if d.retention < 24*time.Hour {
		return nil, usageError{fmt.Errorf("--records-retention must be at least a day, not %v", d.retention)}
	}
	pg, err := postgres.Open(ctx, d.url, reg, postgres.Options{Retention: d.retention, Log: log})
	if err != nil {
		return nil, fmt.Errorf("invocation records: %w", err)
	}
	return &recordStore{Sink: pg, RecordReader: pg, close: pg.Start()}, nil
}

// openRuns returns the PostgreSQL run store when a URL is set, keeping
// its partitions until ctx ends; nil without one.
func (d *databaseFlags) openRuns(ctx context.Context, log *slog.Logger) (runs.Store, func(), error) {
	if d.url == "" {
		return nil, func() {}, nil
	}
	s, err := runspg.Open(ctx, d.url, runspg.Options{Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("runs: %w", err)
	}
	go s.Maintain(ctx, time.Hour)
	return s, s.Close, nil
}
