package local

import (
	"context"
	"slices"
	"sync"

	"sless.dev/sless/local/manifests"
)

// maxParallelPrepare bounds the builds and installs run at once: a
// first start prepares every function, and each go build uses every core.
const maxParallelPrepare = 4

// build is one preparation of a version of a function, queued or running
// beside the manifest loop, which never waits for it: a new change of the
// function, or its removal, cancels it.
type build struct {
	fn     manifests.Entry
	fp     string // the fingerprint it builds
	ctx    context.Context
	cancel context.CancelFunc
	// urgent builds (a change of a function that runs) go before the
	// others (first builds) waiting for a slot, so that an edit is served
	// once its own build is done, however many new functions wait.
	urgent bool
	run    func(*build)
	done   chan struct{} // closed once it ran, or was dropped cancelled
}

// builds runs builds, at most max at once, urgent ones first and each
// kind in the order queued. A build cancelled while it waits is dropped.
type builds struct {
	max int

	mu      sync.Mutex
	running int
	waiting []*build
	all     sync.WaitGroup
}

// add queues b, and runs it at once when a slot is free.
func (q *builds) add(b *build) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.all.Add(1)
	if q.running < q.max {
		q.running++
		go q.runFrom(b)
		return
	}
	i := len(q.waiting)
	if b.urgent {
		i = slices.IndexFunc(q.waiting, func(w *build) bool { return !w.urgent })
		if i < 0 {
			i = len(q.waiting)
		}
	}
	q.waiting = slices.Insert(q.waiting, i, b)
}

// runFrom runs b, then the builds waiting, in one slot, until none is
// left.
func (q *builds) runFrom(b *build) {
	for b != nil {
		b.run(b)
		q.finished(b)
		b = q.next()
	}
}

// next takes the first build waiting that is not cancelled, or frees the
// slot and returns nil.
func (q *builds) next() *build {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.waiting) > 0 {
		b := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		if b.ctx.Err() == nil {
			return b
		}
		q.finished(b)
	}
	q.running--
	return nil
}

func (q *builds) finished(b *build) {
	close(b.done)
	q.all.Done()
}

// wait waits for every build queued to run or be dropped.
func (q *builds) wait() { q.all.Wait() }
