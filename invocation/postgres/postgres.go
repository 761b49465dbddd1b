// Package postgres keeps invocation records in PostgreSQL: Add batches them
// into COPY from a bounded buffer, so the request path never waits on the
// database, and List and Summary answer the admin API from them.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
	"sless.dev/sless/internal/pgstore"
	"sless.dev/sless/invocation"
)

// Options configure a Store; the zero value of each field is its default.
type Options struct {
	// Buffer bounds the records waiting to be written: past it, records
	// are dropped and counted.
	Buffer int
	// BatchSize and FlushInterval: records are written when BatchSize
	// are waiting, or FlushInterval after the first, whichever is first.
	BatchSize     int
	FlushInterval time.Duration
	// WriteTimeout bounds one batch's write.
	WriteTimeout time.Duration
	// Retention is how long records are kept, in whole days.
	Retention time.Duration
	// MaxConns bounds the store's connections, whatever the load.
	MaxConns int32
	Log      *slog.Logger
}

// Defaults of Options.
const (
	DefaultBuffer        = 65_536
	DefaultBatchSize     = 5_000
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultWriteTimeout  = 10 * time.Second
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultMaxConns      = 4
)

func (o *Options) defaults() {
	o.Buffer = cmpOr(o.Buffer, DefaultBuffer)
	o.BatchSize = cmpOr(o.BatchSize, DefaultBatchSize)
	o.FlushInterval = cmpOr(o.FlushInterval, DefaultFlushInterval)
	o.WriteTimeout = cmpOr(o.WriteTimeout, DefaultWriteTimeout)
	o.Retention = cmpOr(o.Retention, DefaultRetention)
	o.MaxConns = cmpOr(o.MaxConns, DefaultMaxConns)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Store is the PostgreSQL invocation store.
type Store struct {
	opts    Options
	pool    *pgxpool.Pool
	host    string
	records chan invocation.Record
	metrics *metrics
	down    atomic.Bool // the last write failed: the outage is logged once
}

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is tern's record of the migrations applied.
const versionTable = "sless_schema_version"

// table is the records' table, partitioned by day.
var table = pgstore.Daily{Table: "sless_invocations", Column: "started_at", Lock: 0x51e55_7ec0}

// Open connects to the database at url, migrates its schema, creates the
// partitions around now and returns the store; Start writes its records. A
// bad URL or an unreachable database is an error naming the host, never
// the password.
func Open(ctx context.Context, url string, reg prometheus.Registerer, opts Options) (*Store, error) {
	opts.defaults()
	s := &Store{opts: opts, records: make(chan invocation.Record, opts.Buffer)}
	var err error
	if s.metrics, err = newMetrics(reg); err != nil {
		return nil, err
	}
	if s.pool, s.host, err = pgstore.Open(ctx, url, "sless-invocation-records", opts.MaxConns); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err == nil {
		err = pgstore.Migrate(ctx, s.pool, sub, versionTable)
	}
	if err == nil {
		err = s.maintain(ctx, time.Now())
	}
	if err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("database %s: %w", s.host, err)
	}
	return s, nil
}

// maintain keeps the partitions: new days ahead, old ones dropped.
func (s *Store) maintain(ctx context.Context, now time.Time) error {
	return table.Maintain(ctx, s.pool, now, s.opts.Retention)
}

// Start writes the records added in the background, on a context of its
// own, until stop: the records of requests drained at shutdown are written
// too. stop writes what is buffered, within the write timeout, and closes
// the store's connections.
func (s *Store) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	return func() { cancel(); <-done; s.Close() }
}

// Close closes the store's connections: for a store opened and not
// started, or after stop.
func (s *Store) Close() { s.pool.Close() }

// Add queues a record for writing, or drops and counts it when the buffer
// is full. It never blocks: the request path calls it.
func (s *Store) Add(r invocation.Record) {
	select {
	case s.records <- r:
	default:
		s.metrics.droppedFull.Inc()
	}
}

// run writes the records added, in batches, and keeps the partitions (new
// days ahead, old ones dropped), until ctx ends; then it writes what is
// buffered, within the write timeout.
func (s *Store) run(ctx context.Context) {
	go pgstore.Every(ctx, time.Hour, func(now time.Time) error { return s.maintain(ctx, now) }, func(err error) {
		s.opts.Log.Warn("invocation records: partition maintenance", "database", s.host, "err", err)
	})
	batch := make([]invocation.Record, 0, s.opts.BatchSize)
	flush := time.NewTimer(s.opts.FlushInterval)
	flush.Stop()
	for {
		select {
		case r := <-s.records:
			if len(batch) == 0 {
				flush.Reset(s.opts.FlushInterval)
			}
			if batch = append(batch, r); len(batch) == s.opts.BatchSize {
				batch = s.write(batch)
			}
		case <-flush.C:
			batch = s.write(batch)
		case <-ctx.Done():
			s.drain(batch)
			return
		}
	}
}

// drain writes what is left when Run ends.
func (s *Store) drain(batch []invocation.Record) {
	for {
		select {
		case r := <-s.records:
			if batch = append(batch, r); len(batch) == s.opts.BatchSize {
				batch = s.write(batch)
			}
		default:
			s.write(batch)
			return
		}
	}
}

// columns are the table's, in the order row gives them.
var columns = []string{"started_at", "namespace", "function", "trigger", "trigger_name", "status",
	"duration_ns", "queue_wait_ns", "cold_start", "cold_start_wait_ns", "bytes_in", "bytes_out",
	"instance", "request_id", "error"}

func row(r *invocation.Record) []any {
	return []any{r.Start, r.Namespace, r.Function, r.Trigger, r.TriggerName, int16(r.Status),
		int64(r.Duration), int64(r.QueueWait), r.ColdStart, int64(r.ColdStartWait), int64(r.BytesIn), int64(r.BytesOut),
		r.Instance, r.RequestID, invocation.TruncateError(r.Error)}
}

// write copies a batch into the table and returns it emptied. A failed
// batch is dropped and counted: the buffer keeps filling meanwhile, and
// a retry would only delay the batches behind it.
func (s *Store) write(batch []invocation.Record) []invocation.Record {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout)
	defer cancel()
	start := time.Now()
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"sless_invocations"}, columns,
		pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) { return row(&batch[i]), nil }))
	if err != nil {
		s.metrics.droppedDatabase.Add(float64(len(batch)))
		if !s.down.Swap(true) {
			s.opts.Log.Warn("invocation records: database unavailable, dropping records until it is back",
				"database", s.host, "err", err)
		}
	} else {
		s.metrics.written.Add(float64(len(batch)))
		s.metrics.writeDuration.Observe(time.Since(start).Seconds())
		if s.down.Swap(false) {
			s.opts.Log.Info("invocation records: database back, writing again", "database", s.host)
		}
	}
	clear(batch)
	return batch[:0]
}

type metrics struct {
	written                      prometheus.Counter
	droppedFull, droppedDatabase prometheus.Counter
	writeDuration                prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	written := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sless_invocation_records_written_total",
		Help: "Invocation records written to the database.",
	})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sless_invocation_records_dropped_total",
		Help: "Invocation records dropped: buffer_full when they came faster than the database took them, database when a write failed.",
	}, []string{"reason"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sless_invocation_records_write_duration_seconds",
		Help:    "Time to write one batch of invocation records.",
		Buckets: httpmetrics.DurationBuckets,
	})
	for _, c := range []prometheus.Collector{written, dropped, duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("invocation records metrics: %w", err)
		}
	}
	return &metrics{written: written, droppedFull: dropped.WithLabelValues("buffer_full"),
		droppedDatabase: dropped.WithLabelValues("database"), writeDuration: duration}, nil
}
