package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/invocation"
	"sless.dev/sless/runs"
)

// finishing is an attempt's outcome to store, and what storing it found.
type finishing struct {
	a  runs.Attempt
	o  runs.Outcome
	at time.Time
	// next is the id of the run the outcome makes (o.Next), inserted in
	// the same transaction.
	next runs.ID
	// run is the run after the outcome, found false when the attempt no
	// longer held it.
	run   runs.Run
	found bool
}

// Finish implements runs.Store. An outcome that makes no run is stored
// with the others made at once, in one statement and commit (batcher);
// one that makes a run inserts it in the transaction that ends its own.
func (s *Store) Finish(ctx context.Context, a runs.Attempt, o runs.Outcome) (runs.Run, error) {
	if err := o.Check(); err != nil {
		return runs.Run{}, err
	}
	f := &finishing{a: a, o: o, at: now()}
	var err error
	if o.Next == nil || o.State == runs.Queued {
		err = s.finishes.do(ctx, f)
	} else {
		f.next = runs.NewID()
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := finishAll(ctx, tx, []*finishing{f}); err != nil || !f.found {
				return err
			}
			return s.insertNext(ctx, tx, f.next, o.Next, f.at)
		})
	}
	switch {
	case err != nil:
		return runs.Run{}, s.fail("finish", err)
	case !f.found:
		r, err := s.Get(ctx, a.Run.ID)
		if err == nil {
			err = runs.ErrAttemptOver
		}
		return r, err
	}
	return f.run, nil
}

// insertNext inserts the run an ended run's end made, in the
// transaction that ends it.
func (s *Store) insertNext(ctx context.Context, tx pgx.Tx, id runs.ID, sub *runs.Submission, at time.Time) error {
	header, err := json.Marshal(nonNil(sub.Request.Header))
	if err != nil {
		return err
	}
	_, err = s.insert(ctx, tx, id, *sub, header, at)
	return err
}

// finishAll stores a batch of outcomes, in one statement.
func (s *Store) finishAll(ctx context.Context, batch []*finishing) error {
	return finishAll(ctx, s.pool, batch)
}

// queryer is a pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// finishAll stores a batch of outcomes, in one statement on q: each of
// a run still held by its attempt (running, its attempts the attempt's
// number).
func finishAll(ctx context.Context, q queryer, batch []*finishing) error {
	n := len(batch)
	ids, created, numbers := make([]string, n), make([]time.Time, n), make([]int32, n)
	states, notBefore, completed := make([]string, n), make([]time.Time, n), make([]*time.Time, n)
	errs, statuses, types, results := make([]string, n), make([]int32, n), make([]string, n), make([][]byte, n)
	truncated, sizes, unsent := make([]bool, n), make([]int64, n), make([]int32, n)
	next, publishTo := make([]string, n), make([]string, n)
	for i, f := range batch {
		f.found = false // from a batch refused, tried again alone
		o := &f.o
		ids[i], created[i], numbers[i] = string(f.a.Run.ID), f.a.Run.CreatedAt, int32(f.a.Number)
		states[i], notBefore[i], errs[i] = string(o.State), o.RetryAt, invocation.TruncateError(o.Error)
		if o.State != runs.Queued {
			notBefore[i], completed[i], publishTo[i] = f.at, &f.at, o.Publish
		}
		if o.Result.Status > 0 {
			statuses[i], types[i], results[i] = int32(o.Result.Status), o.Result.ContentType, nonNil(o.Result.Body)
			truncated[i], sizes[i] = o.Result.Truncated, o.Result.BodySize
		}
		if o.Unsent {
			unsent[i] = 1
		}
		next[i] = string(f.next)
	}
	rows, err := q.Query(ctx, `update sless_runs r set state = u.state, not_before = u.not_before,
			completed_at = u.completed_at, attempts = r.attempts - u.unsent, error = u.error,
			status = case when u.status > 0 then u.status else r.status end,
			content_type = case when u.status > 0 then u.content_type else r.content_type end,
			result = coalesce(u.result, r.result),
			result_truncated = case when u.status > 0 then u.truncated else r.result_truncated end,
			result_size = case when u.status > 0 then u.size else r.result_size end,
			next = u.next, publish_to = u.publish_to
		from unnest($1::text[], $2::timestamptz[], $3::int[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[],
			$8::int[], $9::text[], $10::bytea[], $11::bool[], $12::bigint[], $13::int[], $14::text[], $15::text[])
			with ordinality as u(id, created_at, number, state, not_before, completed_at, error,
				status, content_type, result, truncated, size, unsent, next, publish_to, i)
		where r.id = u.id and r.created_at = u.created_at and r.state = 'running' and r.attempts = u.number
		returning u.i, `+prefixed("r.", runColumns),
		ids, created, numbers, states, notBefore, completed, errs, statuses, types, results, truncated, sizes, unsent, next, publishTo)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var i int64
		var r runs.Run
		if err := rows.Scan(append([]any{&i}, runFields(&r)...)...); err != nil {
			return err
		}
		f := batch[i-1] // ordinality counts from 1
		f.run, f.found = r, true
	}
	return rows.Err()
}
