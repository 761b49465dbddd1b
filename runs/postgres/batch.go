package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"sless.dev/sless/runs"
)

// batcher gathers the submissions made at once into one INSERT and one
// commit: a commit, not a row, is what a database does a few thousand of
// a second, and a burst of runs needs no more commits than there are
// batchers. Each submission still returns only once its run is committed,
// or with the error that kept it out. A batch the database refuses is
// tried again a row at a time, so that a row it cannot take fails alone.
type batcher struct {
	pool  *pgxpool.Pool
	queue chan *submission

	mu     sync.RWMutex // held to enqueue; taken to close
	closed bool
	done   sync.WaitGroup
}

// submission is a run waiting for its batch's commit.
type submission struct {
	run    runs.Run
	req    *runs.Request
	header []byte
	expiry time.Time
	err    chan error
}

// The bounds of the batches: how many are inserted at once, and how many
// submissions may wait for one.
const (
	maxBatch   = 256
	maxWaiting = 4096
)

var errClosed = errors.New("runs: the store is closed")

func newBatcher(pool *pgxpool.Pool, workers int) *batcher {
	b := &batcher{pool: pool, queue: make(chan *submission, maxWaiting)}
	for range workers {
		b.done.Go(b.work)
	}
	return b
}

// submit waits for s's commit.
func (b *batcher) submit(ctx context.Context, s *submission) error {
	s.err = make(chan error, 1)
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return errClosed
	}
	select {
	case b.queue <- s:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return ctx.Err()
	}
	return <-s.err // every batch ends, within the pool's own bounds
}

// close answers what waits and stops the workers.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	close(b.queue)
	b.mu.Unlock()
	b.done.Wait()
}

// work inserts the submissions waiting, as many at once as wait, until
// the queue is closed and empty.
func (b *batcher) work() {
	batch := make([]*submission, 0, maxBatch)
	for s := range b.queue {
		batch = append(batch[:0], s)
	gather:
		for len(batch) < maxBatch {
			select {
			case next, ok := <-b.queue:
				if !ok {
					break gather
				}
				batch = append(batch, next)
			default:
				break gather
			}
		}
		b.insert(batch)
	}
}

// insert commits a batch, or each of its rows alone when the database
// refused the batch (it was rolled back). Any other failure (the
// connection lost) fails them all: the batch may have been committed, and
// a row inserted again would be a second run.
func (b *batcher) insert(batch []*submission) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	err := b.insertAll(ctx, batch)
	if _, refused := errors.AsType[*pgconn.PgError](err); !refused || len(batch) == 1 {
		for _, s := range batch {
			s.err <- err
		}
		return
	}
	for _, s := range batch {
		s.err <- b.insertAll(ctx, []*submission{s})
	}
}

// batchTimeout bounds a batch's insert, and its retries a row at a time.
const batchTimeout = 10 * time.Second

func (b *batcher) insertAll(ctx context.Context, batch []*submission) error {
	n := len(batch)
	ids, namespaces, functions := make([]string, n), make([]string, n), make([]string, n)
	created, expiries := make([]time.Time, n), make([]time.Time, n)
	methods, paths, headers, bodies := make([]string, n), make([]string, n), make([]string, n), make([][]byte, n)
	for i, s := range batch {
		ids[i], namespaces[i], functions[i] = string(s.run.ID), s.run.Namespace, s.run.Function
		created[i], expiries[i] = s.run.CreatedAt, s.expiry
		methods[i], paths[i], headers[i], bodies[i] = s.req.Method, s.req.Path, string(s.header), nonNil(s.req.Body)
	}
	_, err := b.pool.Exec(ctx, `insert into sless_runs (id, namespace, function, state, created_at, not_before,
			expires_at, method, path, header, body)
		select id, namespace, function, 'queued', created_at, created_at, expires_at, method, path, header, body
		from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[],
			$8::jsonb[], $9::bytea[]) as r(id, namespace, function, created_at, expires_at, method, path, header, body)`,
		ids, namespaces, functions, created, expiries, methods, paths, headers, bodies)
	return err
}
