package activator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/runs"
)

// leaseMargin is what a run's lease adds to its function's longest
// request: an attempt that outlives its lease could overlap the next.
const leaseMargin = 10 * time.Second

// expireEvery is how many of the dispatcher's intervals pass between two
// expiries of the runs queued too long.
const expireEvery = 20

// overEvery is how often the dispatcher asks the store which of the
// attempts under way here no longer hold their run (cancelled, or their
// lease ran out), to cut their requests short.
const overEvery = time.Second

// storeTimeout bounds each call to the run store: a database that stops
// answering holds no caller, dispatcher or attempt for longer.
const storeTimeout = 10 * time.Second

// maxClaim bounds the runs one claim takes: one statement each.
const maxClaim = 100

// pendingCost is how many times its own duration passes between two reads
// of every function's runs not ended (Pending): with a large backlog the
// read is long, and claiming, not counting, is the dispatcher's work.
const pendingCost = 10

// Dispatch attempts the runs due of the functions the activator serves,
// each through the same throttling, instances and records as a request,
// and with a RunsConfig.BrokerURL publishes the answers of ended runs,
// until ctx ends: call it with the context that ends as the activator
// begins to stop, so that it claims no run it may not finish. It reads
// which functions have runs due every RunsConfig.Interval (or ten times
// that read's own duration, when longer), and claims at once for a
// function a run was submitted to here, or whose attempt ended here while
// it had more due. It returns once the attempts under way have ended and
// their outcomes are stored; one cut short by the process's end is
// attempted again once its lease runs out.
func (a *Activator) Dispatch(ctx context.Context) {
	r := a.runs
	if r == nil {
		return
	}
	defer r.attempts.Wait()
	if r.cfg.BrokerURL != "" {
		published := make(chan struct{})
		go func() { a.publishAnswers(ctx); close(published) }()
		defer func() { <-published }()
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	failing := false // the store failed at the last look: said once
	var read, expired, checked time.Time
	var took time.Duration
	for {
		var err error
		if time.Since(read) >= max(r.cfg.Interval, pendingCost*took) {
			read = time.Now()
			if err = a.readPending(ctx); err == nil {
				took = time.Since(read)
			} else {
				took = 0 // a store failing is read again at the next interval
			}
		}
		if err == nil {
			err = a.dispatchDue(ctx)
		}
		if err == nil && time.Since(expired) >= expireEvery*r.cfg.Interval {
			expired = time.Now()
			err = r.expire(ctx)
		}
		if err == nil && time.Since(checked) >= overEvery {
			checked = time.Now()
			err = r.cutOver(ctx)
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			a.log.Warn("runs: the store cannot be read: no run is attempted until it can", "err", err)
		case err == nil && failing:
			a.log.Info("runs: the store can be read again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}

// readPending reads every function's runs not ended, for the metrics,
// and marks due those with runs due.
func (a *Activator) readPending(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, storeTimeout)
	pending, err := a.runs.store.Pending(pctx)
	cancel()
	if err != nil {
		return err
	}
	r := a.runs
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = pending
	for _, d := range pending {
		if d.Due > 0 {
			r.due[types.NamespacedName{Namespace: d.Namespace, Name: d.Function}]++
		}
	}
	return nil
}

// dispatchDue claims runs of the functions marked due, each up to its
// concurrency, and starts their attempts.
func (a *Activator) dispatchDue(ctx context.Context) error {
	r := a.runs
	r.mu.Lock()
	due := maps.Clone(r.due)
	r.mu.Unlock()
	for key, mark := range due {
		// A run of a function not served here waits: another activator
		// may serve it, or its Function come back before it expires.
		rt := a.routes.get(key.Namespace, key.Name)
		if rt == nil {
			r.notDue(key, mark)
			continue
		}
		if err := a.claim(ctx, rt, mark); err != nil {
			return err
		}
	}
	return nil
}

// claim takes as many runs of rt as its concurrency leaves room for, up to
// maxClaim, and starts their attempts. A claim that finds fewer than it
// asked for unmarks the function, unless it was marked again since mark.
func (a *Activator) claim(ctx context.Context, rt *route, mark uint64) error {
	r := a.runs
	key := types.NamespacedName{Namespace: rt.fn.Namespace, Name: rt.fn.Name}
	n := r.reserve(key, max(rt.fn.Runs.Concurrency, 1))
	if n == 0 {
		return nil // still due: an attempt's end wakes the dispatcher
	}
	lease := max(rt.fn.MaxDuration, rt.fn.Timeout) + leaseMargin
	cctx, cancel := context.WithTimeout(ctx, storeTimeout)
	ats, err := r.store.Claim(cctx, rt.fn.Namespace, rt.fn.Name, lease, max(rt.fn.Runs.MaxAttempts, 1), n)
	cancel()
	r.unreserve(key, n-len(ats))
	if err != nil {
		return err
	}
	if len(ats) < n {
		r.notDue(key, mark)
	}
	for _, at := range ats {
		r.attempts.Add(1)
		go func() {
			defer r.attempts.Done()
			defer r.release(key)
			a.attempt(rt, at, ctx.Done())
		}()
	}
	return nil
}

// reserve takes as many of a function's attempts in flight as are free
// below limit, up to maxClaim, and says how many it took.
func (r *runner) reserve(key types.NamespacedName, limit int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(limit-r.inFlight[key], maxClaim)
	if n <= 0 {
		return 0
	}
	r.inFlight[key] += n
	return n
}

// unreserve gives back n attempts reserve took that no run was claimed
// for.
func (r *runner) unreserve(key types.NamespacedName, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[key] -= n; r.inFlight[key] <= 0 {
		delete(r.inFlight, key)
	}
}

// wakeFor marks a function due and wakes the dispatcher: a run of it was
// submitted here.
func (r *runner) wakeFor(key types.NamespacedName) {
	r.mu.Lock()
	r.due[key]++
	r.mu.Unlock()
	r.poke()
}

// notDue unmarks a function found with no more runs due, unless it was
// marked again since mark.
func (r *runner) notDue(key types.NamespacedName, mark uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.due[key] == mark {
		delete(r.due, key)
	}
}

// expire ends the runs queued too long.
func (r *runner) expire(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	expired, err := r.store.Expire(ctx)
	for _, c := range expired {
		r.metrics.ended(c.Namespace, c.Function, runs.Expired, c.Runs)
	}
	return err
}

// attemptKey names an attempt: two of one run may be under way here, the
// first one's lease having run out.
type attemptKey struct {
	run    runs.ID
	number int
}

// cutOver cuts short the attempts under way here that no longer hold
// their run.
func (r *runner) cutOver(ctx context.Context) error {
	r.mu.Lock()
	attempts := make([]runs.Attempt, 0, len(r.running))
	for k := range r.running {
		attempts = append(attempts, runs.Attempt{Run: runs.Run{ID: k.run}, Number: k.number})
	}
	r.mu.Unlock()
	if len(attempts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	over, err := r.store.Over(ctx, attempts)
	r.mu.Lock()
	for _, a := range over {
		if caller := r.running[attemptKey{a.Run.ID, a.Number}]; caller != nil {
			caller.HangUp()
		}
	}
	r.mu.Unlock()
	return err
}

// cut cuts short every attempt of run id under way here: it was
// cancelled.
func (r *runner) cut(id runs.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, caller := range r.running {
		if k.run == id {
			caller.HangUp()
		}
	}
}

// track notes an attempt under way, until untrack.
func (r *runner) track(at runs.Attempt, caller *forward.Conn) {
	r.mu.Lock()
	r.running[attemptKey{at.Run.ID, at.Number}] = caller
	r.mu.Unlock()
}

func (r *runner) untrack(at runs.Attempt) {
	r.mu.Lock()
	delete(r.running, attemptKey{at.Run.ID, at.Number})
	r.mu.Unlock()
}

// release gives back an attempt reserve took, and wakes the dispatcher:
// another run may be due.
func (r *runner) release(key types.NamespacedName) {
	r.unreserve(key, 1)
	r.poke()
}

// attempt sends a run's request to the function once, as a request from
// its caller, and records its outcome: the run ends or is queued again,
// as the function's policy says. Its outcome is stored whether or not the
// dispatcher goes on; when the dispatcher stops (stop closes) before an
// instance took the request, the run is given back, unattempted. An
// attempt that no longer holds its run (it was cancelled, its lease ran
// out) is cut short, its outcome not the run's.
func (a *Activator) attempt(rt *route, at runs.Attempt, stop <-chan struct{}) {
	start := time.Now()
	caller := forward.NewCaller()
	a.runs.track(at, caller)
	defer a.runs.untrack(at)
	rctx := new(fasthttp.RequestCtx)
	var req fasthttp.Request
	runRequest(&req, at)
	rctx.Init(&req, fireAddr, nil)
	served := make(chan struct{})
	res := a.serve(rctx, rt, start.Add(rt.fn.Timeout), caller, waitingUntil(stop, caller.Gone(), served))
	close(served)
	if res.code == forward.StatusClientClosedRequest {
		a.giveBack(at) // unsent, or cut short: the store takes it back, or says it is over
		return
	}
	result := runs.Result{Status: res.code, ContentType: strings.ToValidUTF8(string(rctx.Response.Header.Peek("Content-Type")), "\uFFFD")}
	if res.body != nil {
		a.readResult(rt, start, &res, &result)
	} else {
		a.keep(&result, rctx.Response.Body())
	}
	res.trigger = "run"
	a.finish(rctx, rt, start, res)

	answer := runs.Answer{Status: res.code, Failure: strings.ToValidUTF8(res.err, "\uFFFD")}
	if s, err := strconv.Atoi(string(rctx.Response.Header.Peek("Retry-After"))); err == nil && s > 0 {
		answer.RetryAfter = time.Duration(s) * time.Second
	}
	if res.err != "" && res.code == fasthttp.StatusNotFound {
		// Its Function was removed meanwhile: the run waits for it to
		// come back, or expires, as a run of a function not served does.
		answer.Status = fasthttp.StatusServiceUnavailable
	}
	o := rt.fn.Runs.Outcome(at.Number, answer, time.Now())
	if res.err == "" {
		// The function's answer; not the platform's, when it failed
		// the attempt (the run's error says why).
		o.Result = result
	}
	rt.fn.Runs.Link(at, &o)
	if o.Publish != "" && a.runs.cfg.BrokerURL == "" && a.runs.unbrokered.CompareAndSwap(false, true) {
		a.log.Warn("runs: answers to publish to a queue wait, kept with their runs: this activator has no broker (--rabbitmq-url)",
			"namespace", rt.fn.Namespace, "function", rt.fn.Name, "queue", o.Publish)
	}
	if o.Next != nil {
		if next := a.routes.get(o.Next.Namespace, o.Next.Function); next != nil {
			o.Next.MaxAge = next.fn.Runs.MaxAge
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	r, err := a.runs.store.Finish(ctx, at, o)
	switch {
	case err == nil:
		a.runs.announce(at.Run.ID)
		a.runs.metrics.attempted(rt.fn.Namespace, rt.fn.Name, o)
		if r.Next != "" {
			a.runs.metrics.submitted.WithLabelValues(o.Next.Namespace, o.Next.Function).Inc()
			a.runs.wakeFor(types.NamespacedName{Namespace: o.Next.Namespace, Name: o.Next.Function})
		}
		if r.PublishTo != "" {
			a.runs.pokePublisher()
		}
	case !errors.Is(err, runs.ErrAttemptOver):
		// Over (cancelled, or its lease ran out), its outcome is not
		// the run's. Else the run is attempted again once its lease
		// runs out: at least once.
		a.log.Warn("runs: an attempt's outcome could not be stored; the run will be attempted again",
			"run", at.Run.ID, "attempt", at.Number, "err", err)
	}
}

// waitingUntil is closed when stop or cut closes: a run's attempt waits
// for an instance until either. It is left open once served closes.
func waitingUntil(stop, cut, served <-chan struct{}) <-chan struct{} {
	either := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-cut:
		case <-served:
			return
		}
		close(either)
	}()
	return either
}

// giveBack queues a run again whose attempt never reached its function.
func (a *Activator) giveBack(at runs.Attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	o := runs.Outcome{State: runs.Queued, RetryAt: time.Now(), Unsent: true,
		Error: "given back unattempted: its activator stopped before an instance took it"}
	if _, err := a.runs.store.Finish(ctx, at, o); err != nil && !errors.Is(err, runs.ErrAttemptOver) {
		a.log.Warn("runs: a run could not be given back; it will be attempted again once its lease runs out",
			"run", at.Run.ID, "err", err)
	}
}

// runRequest builds the request of a run's attempt: the caller's, with
// the run's id and the attempt's number.
func runRequest(req *fasthttp.Request, at runs.Attempt) {
	req.Header.SetMethod(at.Request.Method)
	req.SetRequestURI(at.Request.Path)
	for _, f := range at.Request.Header {
		if f[0] == "Host" {
			req.Header.SetHost(f[1])
		} else {
			req.Header.Add(f[0], f[1])
		}
	}
	req.Header.Set(wire.RunIDHeader, string(at.Run.ID))
	req.Header.Set(wire.RunAttemptHeader, strconv.Itoa(at.Number))
	req.SetBody(at.Request.Body)
}

// readResult reads a streamed answer to its end within the function's
// bounds, keeping its start, and gives its instance back. An answer cut
// midway fails the attempt (res.err says how).
func (a *Activator) readResult(rt *route, start time.Time, res *result, into *runs.Result) {
	res.body.Bound(start.Add(max(rt.fn.MaxDuration, rt.fn.Timeout)), rt.fn.IdleTimeout)
	var kept bytes.Buffer
	n, _ := io.Copy(&kept, io.LimitReader(res.body, int64(a.runs.cfg.MaxResultBytes)))
	rest, _ := io.Copy(io.Discard, res.body)
	_ = res.body.Close()
	res.lease.Release()
	into.Body, into.BodySize, into.Truncated = kept.Bytes(), n+rest, rest > 0
	if f, cut := res.body.Cut(); cut {
		res.code, res.err = f.Code, "answer cut: "+f.Cause
	}
}

// keep keeps an answer's body, up to the bound.
func (a *Activator) keep(into *runs.Result, body []byte) {
	into.BodySize = int64(len(body))
	if len(body) > a.runs.cfg.MaxResultBytes {
		body, into.Truncated = body[:a.runs.cfg.MaxResultBytes], true
	}
	into.Body = bytes.Clone(body)
}
