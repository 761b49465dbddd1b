package activator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
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
	// when one is submitted here or an attempt ends.
	Interval time.Duration
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

	metrics *runMetrics

	mu       sync.Mutex
	inFlight map[types.NamespacedName]int
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
	a.runs = &runner{store: store, cfg: cfg, wake: make(chan struct{}, 1), inFlight: map[types.NamespacedName]int{},
		metrics: a.metrics.runs, running: map[attemptKey]*forward.Conn{}, waiters: map[runs.ID]*waiters{}}
}

// wantsAsync says whether a request prefers an asynchronous answer
// (RFC 7240's respond-async).
func wantsAsync(h *fasthttp.RequestHeader) bool {
	v := h.Peek("Prefer")
	if len(v) == 0 {
		return false
	}
	for pref := range bytes.SplitSeq(v, []byte(",")) {
		name, _, _ := bytes.Cut(pref, []byte(";"))
		name, _, _ = bytes.Cut(name, []byte("="))
		if bytes.EqualFold(bytes.TrimSpace(name), []byte(runs.PreferAsync)) {
			return true
		}
	}
	return false
}

// submit stores the request as a run of rt and answers 202 with its id,
// or, when it cannot be stored, why, having stored nothing. The request
// is the one the function would get, its platform fields set.
func (a *Activator) submit(ctx *fasthttp.RequestCtx, rt *route, start time.Time, cc *forward.Conn) {
	if a.runs == nil {
		a.fail(ctx, fasthttp.StatusNotImplemented, "runs are not taken here: the activator keeps them in a database it has none of (--database-url)", rt)
		return
	}
	h := &ctx.Request.Header
	if len(h.Peek("Upgrade")) > 0 {
		a.fail(ctx, fasthttp.StatusBadRequest, "a run cannot switch protocols: send it without Upgrade", rt)
		return
	}
	key := string(h.Peek(runs.IdempotencyKeyHeader))
	if len(key) > runs.MaxIdempotencyKey {
		a.fail(ctx, fasthttp.StatusBadRequest, "Idempotency-Key is longer than "+strconv.Itoa(runs.MaxIdempotencyKey)+" bytes", rt)
		return
	}
	body, err := forward.ReadBody(&ctx.Request, cc, start.Add(rt.fn.Timeout), a.runs.cfg.MaxBodyBytes)
	if err != nil {
		f := forward.Classify(err)
		if errors.Is(err, forward.ErrBodyTooLarge) {
			f.Cause = "a run's body is at most " + strconv.FormatInt(a.runs.cfg.MaxBodyBytes, 10) + " bytes"
		}
		a.fail(ctx, f.Code, f.Message(), rt)
		return
	}
	h.Del("Prefer")
	req, ok := runRequestOf(h, body)
	if !ok || !utf8.ValidString(key) {
		a.fail(ctx, fasthttp.StatusBadRequest, "a run's path, header fields and Idempotency-Key are UTF-8 text, as it is kept", rt)
		return
	}
	// Not the request's context, which ends as the server stops: a run
	// being stored then is stored, and said to be.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, created, err := a.runs.store.Submit(sctx, runs.Submission{Namespace: rt.fn.Namespace, Function: rt.fn.Name,
		Request: req, IdempotencyKey: key, MaxAge: rt.fn.Runs.MaxAge})
	switch {
	case errors.Is(err, runs.ErrKeyConflict):
		a.fail(ctx, fasthttp.StatusUnprocessableEntity, err.Error(), rt)
		return
	case err != nil:
		a.log.Warn("runs: a run could not be stored", "namespace", rt.fn.Namespace, "function", rt.fn.Name, "err", err)
		ctx.Response.Header.Set("Retry-After", "1")
		a.fail(ctx, fasthttp.StatusServiceUnavailable, "the run could not be stored, nothing was kept: "+err.Error(), rt)
		return
	}
	if created {
		a.runs.metrics.submitted.WithLabelValues(rt.fn.Namespace, rt.fn.Name).Inc()
		a.runs.poke()
	}
	location := runs.Path + string(r.ID)
	ctx.Response.Header.Set("Location", location)
	ctx.Response.Header.Set("Preference-Applied", runs.PreferAsync)
	a.writeJSON(ctx, fasthttp.StatusAccepted, runs.Accepted{ID: r.ID, State: r.State, Location: location})
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
func (r *runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// serveRuns serves the runs API: GET /runs/{id} (?wait= holds the answer
// until the run ends, within MaxWait), GET /runs/{id}/result and DELETE
// /runs/{id}. The id is the capability: it is unguessable.
func (a *Activator) serveRuns(ctx *fasthttp.RequestCtx) {
	if a.runs == nil {
		a.fail(ctx, fasthttp.StatusNotImplemented, "no runs here: the activator keeps them in a database it has none of (--database-url)", nil)
		return
	}
	rest := strings.TrimPrefix(string(ctx.Path()), runs.Path)
	id, sub, _ := strings.Cut(rest, "/")
	method := string(ctx.Method())
	switch {
	case id == "" || (sub != "" && sub != "result"):
		a.fail(ctx, fasthttp.StatusNotFound, "no such route: a run is at /runs/{id}, its answer at /runs/{id}/result", nil)
	case !runs.ValidID(id):
		a.fail(ctx, fasthttp.StatusNotFound, "no such run", nil)
	case sub == "result" && method == fasthttp.MethodGet:
		a.runResult(ctx, runs.ID(id))
	case sub == "" && method == fasthttp.MethodGet:
		a.getRun(ctx, runs.ID(id))
	case sub == "" && method == fasthttp.MethodDelete:
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		r, cancelled, err := a.runs.store.Cancel(sctx, runs.ID(id))
		a.runs.announce(runs.ID(id))
		if cancelled {
			a.runs.metrics.ended(r.Namespace, r.Function, runs.Cancelled, 1)
			a.runs.cut(r.ID) // here; another activator's attempt is cut at its next check
		}
		a.answerRun(ctx, r, err)
	default:
		a.fail(ctx, fasthttp.StatusMethodNotAllowed, method+" is not a method of a run", nil)
		ctx.Response.Header.Set("Allow", "GET, DELETE")
	}
}

// getRun answers a run, once it ended when asked to wait.
func (a *Activator) getRun(ctx *fasthttp.RequestCtx, id runs.ID) {
	var wait time.Duration
	if v := ctx.QueryArgs().Peek("wait"); len(v) > 0 {
		d, err := time.ParseDuration(string(v))
		if err != nil || d < 0 {
			a.fail(ctx, fasthttp.StatusBadRequest, "wait is a duration such as 30s, not "+strconv.Quote(string(v)), nil)
			return
		}
		wait = min(d, a.runs.cfg.MaxWait)
	}
	var gone <-chan struct{}
	if cc, ok := ctx.Conn().(*forward.Conn); ok {
		gone = cc.Gone()
	}
	r, err := a.runs.awaitEnd(ctx, id, wait, gone)
	a.answerRun(ctx, r, err)
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

// answerRun answers a run as JSON, or the error reading it.
func (a *Activator) answerRun(ctx *fasthttp.RequestCtx, r runs.Run, err error) {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		a.fail(ctx, fasthttp.StatusNotFound, "no such run", nil)
	case err != nil:
		a.runsUnavailable(ctx, err)
	default:
		a.writeJSON(ctx, fasthttp.StatusOK, r)
	}
}

// runResult answers an ended run's answer as the function gave it.
func (a *Activator) runResult(ctx *fasthttp.RequestCtx, id runs.ID) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, res, err := a.runs.store.Result(sctx, id)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		a.fail(ctx, fasthttp.StatusNotFound, "no such run", nil)
	case errors.Is(err, runs.ErrNotEnded) || err == nil && res.Status == 0:
		why := "the run is " + string(r.State) + ": it has no answer yet"
		if r.State.Ended() {
			why = "the run ended " + string(r.State) + " without an answer"
		}
		a.fail(ctx, fasthttp.StatusConflict, why, nil)
	case err != nil:
		a.runsUnavailable(ctx, err)
	default:
		ctx.Response.SetStatusCode(res.Status)
		if res.ContentType != "" {
			ctx.Response.Header.SetContentType(res.ContentType)
		} else {
			ctx.Response.Header.SetNoDefaultContentType(true)
		}
		ctx.Response.SetBody(res.Body)
	}
}

// runsUnavailable answers a read of the runs that failed: the store is
// out of reach for now.
func (a *Activator) runsUnavailable(ctx *fasthttp.RequestCtx, err error) {
	a.log.Warn("runs: the store could not be read", "err", err)
	ctx.Response.Header.Set("Retry-After", "1")
	a.fail(ctx, fasthttp.StatusServiceUnavailable, "the runs cannot be read now: "+err.Error(), nil)
}

// writeJSON answers v as JSON with code.
func (a *Activator) writeJSON(ctx *fasthttp.RequestCtx, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.log.Error("runs: encode an answer", "err", err)
		code, b = fasthttp.StatusInternalServerError, []byte(`{"error":"the answer could not be encoded"}`)
	}
	ctx.Response.SetStatusCode(code)
	ctx.Response.Header.SetContentType("application/json")
	ctx.Response.SetBody(b)
}
