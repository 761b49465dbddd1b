// Package postgres keeps runs in PostgreSQL, where invocation records
// live: a run is committed before Submit returns, claims take each due run
// once across every process sharing the database (FOR UPDATE SKIP
// LOCKED), and retention drops whole days.
package postgres

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sless.dev/sless/internal/pgstore"
	"sless.dev/sless/runs"
)

// Options configure a Store; the zero value of each field is its default.
type Options struct {
	// Retention is how long runs are kept after their creation, in
	// whole days (runs.DefaultRetention).
	Retention time.Duration
	// KeyWindow is how long an Idempotency-Key answers its first run
	// (runs.DefaultKeyWindow).
	KeyWindow time.Duration
	// MaxConns bounds the store's connections (4).
	MaxConns int32
	Log      *slog.Logger
}

func (o *Options) defaults() {
	o.Retention = cmp.Or(o.Retention, runs.DefaultRetention)
	o.KeyWindow = cmp.Or(o.KeyWindow, runs.DefaultKeyWindow)
	o.MaxConns = cmp.Or(o.MaxConns, 4)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Store is the PostgreSQL run store.
type Store struct {
	opts Options
	pool *pgxpool.Pool
	host string
	// submits batch the submissions without an Idempotency-Key, and
	// finishes the outcomes that make no run.
	submits  *batcher[submission]
	finishes *batcher[finishing]
}

var _ runs.Store = (*Store)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is tern's record of the runs' migrations, apart from the
// invocation records' so that either schema moves on its own.
const versionTable = "sless_runs_schema_version"

// table is the runs' table, partitioned by the day runs were created.
var table = pgstore.Daily{Table: "sless_runs", Column: "created_at", Lock: 0x51e55_0f_2a}

// Open connects to the database at url, migrates its schema and creates
// the partitions around now; Maintain keeps them. A bad URL or an
// unreachable database is an error naming the host, never the password.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	opts.defaults()
	pool, host, err := pgstore.Open(ctx, url, "sless-runs", opts.MaxConns)
	if err != nil {
		return nil, err
	}
	s := &Store{opts: opts, pool: pool, host: host}
	sub, err := fs.Sub(migrations, "migrations")
	if err == nil {
		err = pgstore.Migrate(ctx, pool, sub, versionTable)
	}
	if err == nil {
		err = s.maintain(ctx, time.Now())
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s: %w", host, err)
	}
	workers := max(1, int(opts.MaxConns)/2)
	s.submits = newBatcher(workers, s.insertRuns)
	s.finishes = newBatcher(workers, s.finishAll)
	return s, nil
}

// Close closes the store's connections, once the writes under way are
// answered.
func (s *Store) Close() {
	s.submits.close()
	s.finishes.close()
	s.pool.Close()
}

// Maintain keeps the partitions and forgets the idempotency keys past
// their window, every period until ctx ends.
func (s *Store) Maintain(ctx context.Context, period time.Duration) {
	pgstore.Every(ctx, period, func(now time.Time) error { return s.maintain(ctx, now) }, func(err error) {
		s.opts.Log.Warn("runs: maintenance", "database", s.host, "err", err)
	})
}

func (s *Store) maintain(ctx context.Context, now time.Time) error {
	if err := table.Maintain(ctx, s.pool, now, s.opts.Retention); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, "delete from sless_run_keys where created_at < $1", now.Add(-s.opts.KeyWindow))
	return err
}

// now is the store's clock: Go's, at the database's precision, so that a
// run's times read back equal what Submit answered.
func now() time.Time { return time.Now().Truncate(time.Microsecond) }

// runColumns are what a Run is read from, in scanRun's order.
const runColumns = "id, namespace, function, state, attempts, created_at, started_at, completed_at, status, error, result_size, result_truncated, parent, depth, next, publish_to, published_at"

// runFields are where runColumns are scanned to.
func runFields(r *runs.Run) []any {
	return []any{&r.ID, &r.Namespace, &r.Function, &r.State, &r.Attempts, &r.CreatedAt, &r.StartedAt,
		&r.CompletedAt, &r.Status, &r.Error, &r.ResultSize, &r.ResultTruncated, &r.Parent, &r.Depth, &r.Next, &r.PublishTo, &r.PublishedAt}
}

// resultColumns are what a Run and its Result are read from, in
// scanResult's order.
const resultColumns = runColumns + ", content_type, result"

// scanResult reads a run and its answer, whose status and size are the
// run's.
func scanResult(row pgx.Row, r *runs.Run, res *runs.Result) error {
	if err := row.Scan(append(runFields(r), &res.ContentType, &res.Body)...); err != nil {
		return err
	}
	res.Status, res.BodySize, res.Truncated = r.Status, r.ResultSize, r.ResultTruncated
	return nil
}

func scanRun(row pgx.Row) (runs.Run, error) {
	var r runs.Run
	err := row.Scan(runFields(&r)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, runs.ErrNotFound
	}
	return r, err
}

// Submit implements runs.Store: the run is committed when it returns.
// Submissions without an Idempotency-Key made at once are committed
// together (batcher); one with a key takes it in its own transaction.
func (s *Store) Submit(ctx context.Context, sub runs.Submission) (runs.Run, bool, error) {
	at := now()
	header, err := json.Marshal(nonNil(sub.Request.Header))
	if err != nil {
		return runs.Run{}, false, err
	}
	id := runs.NewID()
	if sub.IdempotencyKey == "" {
		r := runs.Run{ID: id, Namespace: sub.Namespace, Function: sub.Function, State: runs.Queued, CreatedAt: at}
		if err := s.submits.do(ctx, &submission{run: r, req: &sub.Request, header: header, expiry: at.Add(sub.MaxAge)}); err != nil {
			return runs.Run{}, false, s.fail("submit", err)
		}
		return r, true, nil
	}
	var r runs.Run
	var existing runs.ID
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if existing, err = s.useKey(ctx, tx, sub, id, at); err != nil || existing != "" {
			return err
		}
		r, err = s.insert(ctx, tx, id, sub, header, at)
		return err
	})
	if err != nil {
		return runs.Run{}, false, s.fail("submit", err)
	}
	if existing != "" {
		r, err = s.Get(ctx, existing)
		return r, false, err
	}
	return r, true, nil
}

// submission is a run waiting for its batch's commit.
type submission struct {
	run    runs.Run
	req    *runs.Request
	header []byte
	expiry time.Time
}

// insertRuns inserts a batch of submissions in one statement.
func (s *Store) insertRuns(ctx context.Context, batch []*submission) error {
	n := len(batch)
	ids, namespaces, functions := make([]string, n), make([]string, n), make([]string, n)
	created, expiries := make([]time.Time, n), make([]time.Time, n)
	methods, paths, headers, bodies := make([]string, n), make([]string, n), make([]string, n), make([][]byte, n)
	for i, sub := range batch {
		ids[i], namespaces[i], functions[i] = string(sub.run.ID), sub.run.Namespace, sub.run.Function
		created[i], expiries[i] = sub.run.CreatedAt, sub.expiry
		methods[i], paths[i], headers[i], bodies[i] = sub.req.Method, sub.req.Path, string(sub.header), nonNil(sub.req.Body)
	}
	_, err := s.pool.Exec(ctx, `insert into sless_runs (id, namespace, function, state, created_at, not_before,
			expires_at, method, path, header, body)
		select id, namespace, function, 'queued', created_at, created_at, expires_at, method, path, header, body
		from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[],
			$8::jsonb[], $9::bytea[]) as r(id, namespace, function, created_at, expires_at, method, path, header, body)`,
		ids, namespaces, functions, created, expiries, methods, paths, headers, bodies)
	return err
}

// insert inserts a run in a transaction of its own: the one taking its
// Idempotency-Key, or ending the run whose end made it.
func (s *Store) insert(ctx context.Context, q pgx.Tx, id runs.ID, sub runs.Submission, header []byte, at time.Time) (runs.Run, error) {
	return scanRun(q.QueryRow(ctx, `insert into sless_runs (id, namespace, function, state, created_at,
		not_before, expires_at, method, path, header, body, parent, depth) values ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12)
		returning `+runColumns, id, sub.Namespace, sub.Function, runs.Queued, at, at.Add(sub.MaxAge),
		sub.Request.Method, sub.Request.Path, header, nonNil(sub.Request.Body), sub.Parent, sub.Depth))
}

// useKey takes sub's idempotency key for run id, or returns the run it
// names. Of submissions with one key at once, the first to insert it
// makes the run; the others wait for its commit, then read it.
func (s *Store) useKey(ctx context.Context, tx pgx.Tx, sub runs.Submission, id runs.ID, at time.Time) (runs.ID, error) {
	digest := runs.Digest(&sub.Request)
	if _, err := tx.Exec(ctx, "delete from sless_run_keys where namespace = $1 and function = $2 and key = $3 and created_at < $4",
		sub.Namespace, sub.Function, sub.IdempotencyKey, at.Add(-s.opts.KeyWindow)); err != nil {
		return "", err
	}
	tag, err := tx.Exec(ctx, `insert into sless_run_keys (namespace, function, key, digest, run_id, created_at)
		values ($1, $2, $3, $4, $5, $6) on conflict do nothing`, sub.Namespace, sub.Function, sub.IdempotencyKey, digest[:], id, at)
	if err != nil || tag.RowsAffected() == 1 {
		return "", err
	}
	var used []byte
	var run runs.ID
	if err := tx.QueryRow(ctx, "select digest, run_id from sless_run_keys where namespace = $1 and function = $2 and key = $3",
		sub.Namespace, sub.Function, sub.IdempotencyKey).Scan(&used, &run); err != nil {
		return "", err
	}
	if !bytes.Equal(used, digest[:]) {
		return "", runs.ErrKeyConflict
	}
	return run, nil
}

// fail wraps a store error with what failed, keeping the store's own
// errors as they are.
func (s *Store) fail(what string, err error) error {
	for _, own := range []error{runs.ErrNotFound, runs.ErrKeyConflict, runs.ErrNotEnded, runs.ErrAttemptOver} {
		if errors.Is(err, own) {
			return err
		}
	}
	return fmt.Errorf("runs: %s: database %s: %w", what, s.host, err)
}

// Get implements runs.Store.
func (s *Store) Get(ctx context.Context, id runs.ID) (runs.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, "select "+runColumns+" from sless_runs where id = $1", id))
	if err != nil {
		return r, s.fail("get", err)
	}
	return r, nil
}

// Result implements runs.Store.
func (s *Store) Result(ctx context.Context, id runs.ID) (runs.Run, runs.Result, error) {
	var res runs.Result
	var r runs.Run
	err := scanResult(s.pool.QueryRow(ctx, "select "+resultColumns+" from sless_runs where id = $1", id), &r, &res)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, res, runs.ErrNotFound
	case err != nil:
		return r, res, s.fail("result", err)
	case !r.State.Ended():
		return r, runs.Result{}, runs.ErrNotEnded
	}
	return r, res, nil
}

// Cancel implements runs.Store.
func (s *Store) Cancel(ctx context.Context, id runs.ID) (runs.Run, bool, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `update sless_runs set state = $2, completed_at = $3, error = $4
		where id = $1 and state in ('queued', 'running') returning `+runColumns, id, runs.Cancelled, now(), runs.CancelledError))
	if errors.Is(err, runs.ErrNotFound) {
		r, err = s.Get(ctx, id) // ended already, or unknown
		return r, false, err
	}
	if err != nil {
		return r, false, s.fail("cancel", err)
	}
	return r, true, nil
}

// Claim implements runs.Store, in two statements however many it takes.
// A running run's not_before is its lease's end: the one index orders
// queued runs by when they are due and finds the running ones whose lease
// ran out. The runs lost on their last attempt are ended first from the
// index of the running runs alone (sless_runs_running), not from that
// one, where they lie among every run queued.
func (s *Store) Claim(ctx context.Context, namespace, function string, lease time.Duration, maxAttempts, n int) ([]runs.Attempt, error) {
	if n <= 0 {
		return nil, nil
	}
	at := now()
	if _, err := s.pool.Exec(ctx, `update sless_runs set state = $5, completed_at = $3, error = $6
		where namespace = $1 and function = $2 and state = 'running' and not_before <= $3 and attempts >= $4`,
		namespace, function, at, maxAttempts, runs.Failed, runs.LostError); err != nil {
		return nil, s.fail("claim", err)
	}
	rows, err := s.pool.Query(ctx, `update sless_runs r set state = $4, attempts = r.attempts + 1,
			started_at = coalesce(r.started_at, $3), not_before = $5
		from (select id, created_at from sless_runs where namespace = $1 and function = $2
			and state in ('queued', 'running') and not_before <= $3
			order by not_before, created_at limit $6 for update skip locked) due
		where r.id = due.id and r.created_at = due.created_at
		returning `+prefixed("r.", runColumns)+", r.method, r.path, r.header, r.body",
		namespace, function, at, runs.Running, at.Add(lease), n)
	if err != nil {
		return nil, s.fail("claim", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runs.Attempt, error) {
		var a runs.Attempt
		var header []byte
		if err := row.Scan(append(runFields(&a.Run), &a.Request.Method, &a.Request.Path, &header, &a.Request.Body)...); err != nil {
			return a, err
		}
		if err := json.Unmarshal(header, &a.Request.Header); err != nil {
			return a, fmt.Errorf("run %s: its header: %w", a.Run.ID, err)
		}
		a.Number = a.Run.Attempts
		return a, nil
	})
	if err != nil {
		return nil, s.fail("claim", err)
	}
	return out, nil
}

// Publish implements runs.Store. The answers handed to send are locked in
// a transaction until it returns (FOR UPDATE SKIP LOCKED: another
// process's Publish passes them by), and marked in it.
func (s *Store) Publish(ctx context.Context, limit int, send runs.Sender) (int, error) {
	var n int
	var sendErr error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "select "+resultColumns+` from sless_runs
			where publish_to <> '' and published_at is null order by completed_at limit $1 for update skip locked`, limit)
		if err != nil {
			return err
		}
		ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runs.Publication, error) {
			var p runs.Publication
			err := scanResult(row, &p.Run, &p.Result)
			p.Queue = p.Run.PublishTo
			return p, err
		})
		if err != nil || len(ps) == 0 {
			return err
		}
		n, sendErr = send(ctx, ps)
		n = max(0, min(n, len(ps)))
		if n == 0 {
			return nil
		}
		ids, created := make([]string, n), make([]time.Time, n)
		for i, p := range ps[:n] {
			ids[i], created[i] = string(p.Run.ID), p.Run.CreatedAt
		}
		_, err = tx.Exec(ctx, `update sless_runs r set published_at = $3 from unnest($1::text[], $2::timestamptz[]) as p(id, created_at)
			where r.id = p.id and r.created_at = p.created_at`, ids, created, now())
		return err
	})
	if err != nil {
		return 0, s.fail("publish", err)
	}
	return n, sendErr
}

// Over implements runs.Store, in one query however many attempts.
func (s *Store) Over(ctx context.Context, attempts []runs.Attempt) ([]runs.Attempt, error) {
	if len(attempts) == 0 {
		return nil, nil
	}
	ids, numbers := make([]string, len(attempts)), make([]int32, len(attempts))
	for i, a := range attempts {
		ids[i], numbers[i] = string(a.Run.ID), int32(a.Number)
	}
	rows, err := s.pool.Query(ctx, `select a.i from unnest($1::text[], $2::int[]) with ordinality as a(id, number, i)
		left join sless_runs r on r.id = a.id
		where r.id is null or r.state <> 'running' or r.attempts <> a.number`, ids, numbers)
	if err != nil {
		return nil, s.fail("over", err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, s.fail("over", err)
	}
	over := make([]runs.Attempt, len(indexes))
	for i, n := range indexes {
		over[i] = attempts[n-1] // ordinality counts from 1
	}
	return over, nil
}

// Expire implements runs.Store.
func (s *Store) Expire(ctx context.Context) ([]runs.Count, error) {
	at := now()
	rows, err := s.pool.Query(ctx, `with expired as (update sless_runs set state = $2, completed_at = $1, error = $3
			where state = 'queued' and expires_at < $1 returning namespace, function)
		select namespace, function, count(*) from expired group by namespace, function`, at, runs.Expired, runs.ExpiredError)
	if err != nil {
		return nil, s.fail("expire", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runs.Count, error) {
		var c runs.Count
		err := row.Scan(&c.Namespace, &c.Function, &c.Runs)
		return c, err
	})
	if err != nil {
		return nil, s.fail("expire", err)
	}
	return out, nil
}

// Pending implements runs.Store.
func (s *Store) Pending(ctx context.Context) ([]runs.Demand, error) {
	rows, err := s.pool.Query(ctx, `select namespace, function, count(*) filter (where state = 'queued'),
			count(*) filter (where state = 'running'), count(*) filter (where not_before <= $1),
			coalesce(min(created_at) filter (where state = 'queued'), 'epoch')
		from sless_runs where state in ('queued', 'running') group by namespace, function`, now())
	if err != nil {
		return nil, s.fail("pending", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runs.Demand, error) {
		var d runs.Demand
		var oldest time.Time
		err := row.Scan(&d.Namespace, &d.Function, &d.Queued, &d.Running, &d.Due, &oldest)
		if d.Queued > 0 {
			d.OldestQueued = oldest
		}
		return d, err
	})
	if err != nil {
		return nil, s.fail("pending", err)
	}
	return out, nil
}

// List implements runs.Store, from the index of each function's runs by
// their creation.
func (s *Store) List(ctx context.Context, namespace, function string, q runs.Query) ([]runs.Run, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	before := q.Before
	if before.IsZero() {
		before = time.Now().Add(time.Hour) // after any run's creation, on a clock a little ahead
	}
	rows, err := s.pool.Query(ctx, "select "+runColumns+` from sless_runs where namespace = $1 and function = $2
		and (created_at < $3 or $6 <> '' and created_at = $3 and id < $6) and ($4 = '' or state = $4)
		order by created_at desc, id desc limit $5`,
		namespace, function, before, string(q.State), q.LimitOrDefault(), string(q.BeforeID))
	if err != nil {
		return nil, s.fail("list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runs.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, s.fail("list", err)
	}
	return out, nil
}

// prefixed qualifies each of a list of columns with prefix.
func prefixed(prefix, columns string) string {
	var b bytes.Buffer
	for i, c := range bytes.Split([]byte(columns), []byte(", ")) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.Write(c)
	}
	return b.String()
}

// nonNil is s, or an empty slice for nil: the columns are not null, and
// JSON's empty header is [].
func nonNil[S ~[]E, E any](s S) S {
	if s == nil {
		return S{}
	}
	return s
}
