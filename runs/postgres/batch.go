package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// batcher gathers the writes made at once (submissions, attempts'
// outcomes) into one statement and one commit: a commit, not a row, is
// what a database does a few thousand of a second, and a burst of writes
// needs no more commits than there are batchers' workers. Each write
// still returns only once it is committed, or with the error that kept it
// out. A batch the database refuses is tried again a write at a time, so
// that a write it cannot take fails alone.
type batcher[T any] struct {
	// write writes a batch in one statement, setting in each item what
	// its caller is answered.
	write func(ctx context.Context, batch []*T) error
	queue chan *batched[T]

	mu     sync.RWMutex // held to enqueue; taken to close
	closed bool
	done   sync.WaitGroup
}

// batched is a write waiting for its batch's commit.
type batched[T any] struct {
	item *T
	err  chan error
}

// The bounds of the batches: how many writes are made at once, and how
// many may wait for a batch.
const (
	maxBatch   = 256
	maxWaiting = 4096
)

// batchTimeout bounds a batch's write, and its retries a write at a time.
const batchTimeout = 10 * time.Second

var errClosed = errors.New("runs: the store is closed")

func newBatcher[T any](workers int, write func(ctx context.Context, batch []*T) error) *batcher[T] {
	b := &batcher[T]{write: write, queue: make(chan *batched[T], maxWaiting)}
	for range workers {
		b.done.Go(b.work)
	}
	return b
}

// do waits for item's commit.
func (b *batcher[T]) do(ctx context.Context, item *T) error {
	w := &batched[T]{item: item, err: make(chan error, 1)}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return errClosed
	}
	select {
	case b.queue <- w:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		return ctx.Err()
	}
	return <-w.err // every batch ends, within the pool's own bounds
}

// close answers what waits and stops the workers.
func (b *batcher[T]) close() {
	b.mu.Lock()
	b.closed = true
	close(b.queue)
	b.mu.Unlock()
	b.done.Wait()
}

// work writes the items waiting, as many at once as wait, until the queue
// is closed and empty.
func (b *batcher[T]) work() {
	batch := make([]*batched[T], 0, maxBatch)
	for w := range b.queue {
		batch = append(batch[:0], w)
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
		b.writeBatch(batch)
	}
}

// writeBatch commits a batch, or each of its writes alone when the
// database refused the batch (it was rolled back). Any other failure (the
// connection lost) fails them all: the batch may have been committed, and
// a run inserted again would be a second run.
func (b *batcher[T]) writeBatch(batch []*batched[T]) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	items := make([]*T, len(batch))
	for i, w := range batch {
		items[i] = w.item
	}
	err := b.write(ctx, items)
	if _, refused := errors.AsType[*pgconn.PgError](err); !refused || len(batch) == 1 {
		for _, w := range batch {
			w.err <- err
		}
		return
	}
	for _, w := range batch {
		w.err <- b.write(ctx, []*T{w.item})
	}
}
