package activator

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/runs"
)

// RunsConfig bounds the activator's runs; the zero value of each field is
// its default.
type RunsConfig struct {
	// MaxBodyBytes bounds a run's request body (413 beyond).
	MaxBodyBytes int64
	// MaxResultBytes bounds the answer's body a run keeps: the rest is
	// counted, not kept.
	MaxResultBytes int
	// MaxWait bounds a GET /runs/{id}?wait=.
	MaxWait time.Duration
	// Interval is how often the dispatcher looks for runs due, besides
	// when one is submitted here or an attempt ends, and the publisher
	// for answers to publish.
	Interval time.Duration
	// BrokerURL is the RabbitMQ broker that the answers of runs are
	// published to (a function's onSuccess or onFailure queue). Empty,
	// they wait, kept with their runs, for an activator that has one.
	BrokerURL string
}

// Defaults of RunsConfig.
const (
	DefaultRunMaxBodyBytes   = 1 << 20
	DefaultRunMaxResultBytes = 256 << 10
	DefaultRunMaxWait        = time.Minute
	DefaultRunInterval       = 250 * time.Millisecond
)

// runner is the activator's runs: their store, and the dispatcher's count
// of each function's attempts in flight.
type runner struct {
	store runs.Store
	cfg   RunsConfig
	// wake tells the dispatcher to look for runs due now.
	wake chan struct{}
	// toPublish tells the publisher an answer waits to be published.
	toPublish chan struct{}
	// unbrokered is set once an answer to publish was found with no
	// broker to publish it to: said once.
	unbrokered atomic.Bool

	metrics *runMetrics

	mu       sync.Mutex
	inFlight map[types.NamespacedName]int
	// due marks the functions that may have runs due: found so by the
	// last Pending, or sent a run here. Each mark counts up, so that a
	// claim that found none more unmarks only a function not marked
	// since it began.
	due map[types.NamespacedName]uint64
	// pending is what the dispatcher last read of the runs not ended,
	// for the metrics.
	pending []runs.Demand
	// running are the attempts under way here, each with the caller
	// that cuts its request short once it no longer holds its run.
	running map[attemptKey]*forward.Conn
	// waiters are the readers waiting for a run's end here, told when
	// the run changes here (an attempt's outcome, a cancel) so that they
	// look again at once rather than at their next poll.
	waiters map[runs.ID]*waiters
	// attempts are the attempts under way, which Dispatch waits for.
	attempts sync.WaitGroup
}

// EnableRuns makes the activator take runs (Prefer: respond-async) into
// store, serve the runs API and, with Dispatch, attempt them. Call it
// before serving: without it, a run is refused (501).
func (a *Activator) EnableRuns(store runs.Store, cfg RunsConfig) {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultRunMaxBodyBytes
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = DefaultRunMaxResultBytes
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultRunMaxWait
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultRunInterval
	}
	a.runs = &runner{store: store, cfg: cfg, wake: make(chan struct{}, 1), toPublish: make(chan struct{}, 1), inFlight: map[types.NamespacedName]int{}, due: map[types.NamespacedName]uint64{},
		metrics: a.metrics.runs, running: map[attemptKey]*forward.Conn{}, waiters: map[runs.ID]*waiters{}}
}

// wantsAsync says whether a request prefers an asynchronous answer
// (RFC 7240's respond-async).
func wantsAsync(h *fasthttp.RequestHeader) bool {
	v := h.Peek("Prefer")
	return len(v) > 0 && prefersAsync(string(v))
}

// wantsAsyncHTTP2 is wantsAsync for a request that came over HTTP/2.
func wantsAsyncHTTP2(h http.Header) bool {
	return slices.ContainsFunc(h.Values("Prefer"), prefersAsync)
}

// prefersAsync says whether a Prefer field holds respond-async.
func prefersAsync(v string) bool {
	for pref := range strings.SplitSeq(v, ",") {
		name, _, _ := strings.Cut(pref, ";")
		name, _, _ = strings.Cut(name, "=")
		if strings.EqualFold(strings.TrimSpace(name), runs.PreferAsync) {
			return true
		}
	}
	return false
}

// Why a run is refused where none are kept.
const (
	noRunsTaken  = "runs are not taken here: the activator keeps them in a database it has none of (--database-url)"
	noRunsServed = "no runs here: the activator keeps them in a database it has none of (--database-url)"
	noSwitch     = "a run cannot switch protocols: send it without Upgrade"
)

// submit stores the request as a run of rt and answers 202 with its id,
// or, when it cannot be stored, why, having stored nothing. The request
// is the one the function would get, its platform fields set.
func (a *Activator) submit(ctx *fasthttp.RequestCtx, rt *route, start time.Time, cc *forward.Conn) {
	if a.runs == nil {
		a.answer(ctx, rt, failure(fasthttp.StatusNotImplemented, noRunsTaken))
		return
	}
	h := &ctx.Request.Header
	if len(h.Peek("Upgrade")) > 0 {
		a.answer(ctx, rt, failure(fasthttp.StatusBadRequest, noSwitch))
		return
	}
	body, err := forward.ReadBody(&ctx.Request, cc, start.Add(rt.fn.Timeout), a.runs.cfg.MaxBodyBytes)
	switch {
	case errors.Is(err, forward.ErrBodyTooLarge):
		a.answer(ctx, rt, a.runs.tooLarge())
		return
	case err != nil:
		f := forward.Classify(err)
		a.answer(ctx, rt, failure(f.Code, f.Message()))
		return
	}
	h.Del("Prefer")
	req, text := runRequestOf(h, body)
	a.answer(ctx, rt, a.takeRun(ctx, rt, string(h.Peek(runs.IdempotencyKeyHeader)), req, text))
}

// tooLarge is the answer to a run whose body is over the bound.
func (r *runner) tooLarge() runAnswer {
	return failure(http.StatusRequestEntityTooLarge, "a run's body is at most "+strconv.FormatInt(r.cfg.MaxBodyBytes, 10)+" bytes")
}

// takeRun stores req as a run of rt, once only for its Idempotency-Key,
// and answers 202 with its id, or, when it cannot be stored, why, having
// stored nothing. text says whether the request is UTF-8 text, as a run
// keeps it.
func (a *Activator) takeRun(ctx context.Context, rt *route, key string, req runs.Request, text bool) runAnswer {
	if len(key) > runs.MaxIdempotencyKey {
		return failure(fasthttp.StatusBadRequest, "Idempotency-Key is longer than "+strconv.Itoa(runs.MaxIdempotencyKey)+" bytes")
	}
	if !text || !utf8.ValidString(key) {
		return failure(fasthttp.StatusBadRequest, "a run's path, header fields and Idempotency-Key are UTF-8 text, as it is kept")
	}
	// Not the request's context, which ends as the server stops: a run
	// being stored then is stored, and said to be.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, created, err := a.runs.store.Submit(sctx, runs.Submission{Namespace: rt.fn.Namespace, Function: rt.fn.Name,
		Request: req, IdempotencyKey: key, MaxAge: rt.fn.Runs.MaxAge})
	switch {
	case errors.Is(err, runs.ErrKeyConflict):
		return failure(fasthttp.StatusUnprocessableEntity, err.Error())
	case err != nil:
		a.log.Warn("runs: a run could not be stored", "namespace", rt.fn.Namespace, "function", rt.fn.Name, "err", err)
		return failure(fasthttp.StatusServiceUnavailable, "the run could not be stored, nothing was kept: "+err.Error())
	}
	if created {
		a.runs.metrics.submitted.WithLabelValues(rt.fn.Namespace, rt.fn.Name).Inc()
		a.runs.wakeFor(types.NamespacedName{Namespace: rt.fn.Namespace, Name: rt.fn.Name})
	}
	location := runs.Path + string(r.ID)
	ans := a.jsonAnswer(fasthttp.StatusAccepted, runs.Accepted{ID: r.ID, State: r.State, Location: location})
	ans.fields = [][2]string{{"Location", location}, {"Preference-Applied", runs.PreferAsync}}
	return ans
}

// runRequestOf is the request a run keeps: the one the function would
// get, without its framing (the body is whole); ok false when its path or
// a field is not UTF-8 text.
func runRequestOf(h *fasthttp.RequestHeader, body []byte) (runs.Request, bool) {
	req := runs.Request{Method: string(h.Method()), Path: string(h.RequestURI()), Body: body}
	ok := utf8.ValidString(req.Path)
	for k, v := range h.All() {
		if !bytes.EqualFold(k, []byte("Content-Length")) && !bytes.EqualFold(k, []byte("Transfer-Encoding")) {
			req.Header = append(req.Header, [2]string{string(k), string(v)})
			ok = ok && utf8.Valid(k) && utf8.Valid(v)
		}
	}
	return req, ok
}

// waiters are the readers waiting for one run's next change.
type waiters struct {
	changed chan struct{}
	n       int
}

// wait returns a channel closed at the next change of run id here, and
// the func that says the reader no longer waits.
func (r *runner) wait(id runs.ID) (<-chan struct{}, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiters[id]
	if w == nil {
		w = &waiters{changed: make(chan struct{})}
		r.waiters[id] = w
	}
	w.n++
	return w.changed, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if w.n--; w.n == 0 && r.waiters[id] == w {
			delete(r.waiters, id)
		}
	}
}

// announce tells the readers waiting for run id that it changed here.
func (r *runner) announce(id runs.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.waiters[id]; w != nil {
		close(w.changed)
		delete(r.waiters, id)
	}
}

// poke wakes the dispatcher, without waiting.
func (r *runner) poke() { signal(r.wake) }

// pokePublisher wakes the publisher, without waiting.
func (r *runner) pokePublisher() { signal(r.toPublish) }

// signal sends on c, a channel of one, unless a signal already waits.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// awaitEnd reads a run until it has ended, wait passes, its client
// leaves (gone) or the server stops (ctx), answering it as it is then.
// The store is read again as soon as the run changes here, else after 50
// ms, then less often, to 1 s: a run may end in another activator.
func (r *runner) awaitEnd(ctx context.Context, id runs.ID, wait time.Duration, gone <-chan struct{}) (runs.Run, error) {
	deadline := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	for {
		changed, done := r.wait(id)
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		run, err := r.store.Get(gctx, id)
		cancel()
		left := time.Until(deadline)
		if err != nil || run.State.Ended() || left <= 0 {
			done()
			return run, err
		}
		t := time.NewTimer(min(pause, left))
		stop := false
		select {
		case <-changed: // at once, not at a longer pause
		case <-t.C:
			pause = min(2*pause, time.Second)
		case <-gone:
			stop = true
		case <-ctx.Done():
			stop = true
		}
		t.Stop()
		done()
		if stop {
			return run, nil
		}
	}
}
