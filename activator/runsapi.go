package activator

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/runs"
)

// runAnswer is an answer of the runs API, made once for either transport:
// fasthttp's (HTTP/1.1) and net/http's (HTTP/2, h2c).
type runAnswer struct {
	code int
	// why, when set, makes the answer the platform's error body saying
	// it; else contentType ("" for none) and body are the answer's.
	why         string
	contentType string
	body        []byte
	// fields are header fields the answer adds.
	fields [][2]string
}

// failure is the answer of a runs request that failed, saying why.
func failure(code int, why string) runAnswer { return runAnswer{code: code, why: why} }

// jsonAnswer is v as JSON with code.
func (a *Activator) jsonAnswer(code int, v any) runAnswer {
	b, err := json.Marshal(v)
	if err != nil {
		a.log.Error("runs: encode an answer", "err", err)
		return failure(http.StatusInternalServerError, "the answer could not be encoded")
	}
	return runAnswer{code: code, contentType: "application/json", body: b}
}

// answer writes ans to a fasthttp request, for rt (nil for none).
func (a *Activator) answer(ctx *fasthttp.RequestCtx, rt *route, ans runAnswer) {
	if ans.why != "" {
		a.fail(ctx, ans.code, ans.why, rt)
	} else {
		ctx.Response.SetStatusCode(ans.code)
		if ans.contentType != "" {
			ctx.Response.Header.SetContentType(ans.contentType)
		} else {
			ctx.Response.Header.SetNoDefaultContentType(true)
		}
		ctx.Response.SetBody(ans.body)
	}
	for _, f := range ans.fields {
		ctx.Response.Header.Set(f[0], f[1])
	}
}

// answerHTTP2 writes ans to a net/http request, for rt (nil for none).
func answerHTTP2(w http.ResponseWriter, r *http.Request, rt *route, ans runAnswer) {
	h := w.Header()
	for _, f := range ans.fields {
		h.Set(f[0], f[1])
	}
	if ans.why != "" {
		failHTTP2(w, r, rt, ans.code, ans.why)
		return
	}
	if ans.contentType != "" {
		h.Set("Content-Type", ans.contentType)
	} else {
		h["Content-Type"] = nil // as the function gave it: none, not one sniffed
	}
	h.Set("Content-Length", strconv.Itoa(len(ans.body)))
	w.WriteHeader(ans.code)
	_, _ = w.Write(ans.body)
}

// serveRuns serves the runs API to a fasthttp request.
func (a *Activator) serveRuns(ctx *fasthttp.RequestCtx) {
	var gone <-chan struct{}
	if cc, ok := ctx.Conn().(*forward.Conn); ok {
		gone = cc.Gone()
	}
	a.answer(ctx, nil, a.runsAPI(ctx, string(ctx.Method()), string(ctx.Path()), string(ctx.QueryArgs().Peek("wait")), gone))
}

// serveRunsHTTP2 serves the runs API to a request that came over HTTP/2.
func (a *Activator) serveRunsHTTP2(w http.ResponseWriter, r *http.Request) {
	answerHTTP2(w, r, nil, a.runsAPI(r.Context(), r.Method, r.URL.Path, r.URL.Query().Get("wait"), r.Context().Done()))
}

// runsAPI answers a request of the runs API: GET /runs/{id} (wait, a
// duration, holds the answer until the run ends, within MaxWait, or its
// client leaves: gone), GET /runs/{id}/result and DELETE /runs/{id}. The
// id is the capability: it is unguessable.
func (a *Activator) runsAPI(ctx context.Context, method, path, wait string, gone <-chan struct{}) runAnswer {
	if a.runs == nil {
		return failure(http.StatusNotImplemented, noRunsServed)
	}
	id, sub, _ := strings.Cut(strings.TrimPrefix(path, runs.Path), "/")
	switch {
	case id == "" || (sub != "" && sub != "result"):
		return failure(http.StatusNotFound, "no such route: a run is at /runs/{id}, its answer at /runs/{id}/result")
	case !runs.ValidID(id):
		return failure(http.StatusNotFound, "no such run")
	case sub == "result" && method == http.MethodGet:
		return a.runResult(ctx, runs.ID(id))
	case sub == "" && method == http.MethodGet:
		return a.getRun(ctx, runs.ID(id), wait, gone)
	case sub == "" && method == http.MethodDelete:
		return a.cancelRun(ctx, runs.ID(id))
	}
	ans := failure(http.StatusMethodNotAllowed, method+" is not a method of a run")
	ans.fields = [][2]string{{"Allow", "GET, DELETE"}}
	return ans
}

// getRun answers a run, once it ended when asked to wait.
func (a *Activator) getRun(ctx context.Context, id runs.ID, wait string, gone <-chan struct{}) runAnswer {
	var d time.Duration
	if wait != "" {
		var err error
		if d, err = time.ParseDuration(wait); err != nil || d < 0 {
			return failure(http.StatusBadRequest, "wait is a duration such as 30s, not "+strconv.Quote(wait))
		}
	}
	r, err := a.runs.awaitEnd(ctx, id, min(d, a.runs.cfg.MaxWait), gone)
	return a.runAnswer(r, err)
}

// cancelRun cancels a run, and cuts short its attempt under way here.
func (a *Activator) cancelRun(ctx context.Context, id runs.ID) runAnswer {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, cancelled, err := a.runs.store.Cancel(sctx, id)
	a.runs.announce(id)
	if cancelled {
		a.runs.metrics.ended(r.Namespace, r.Function, runs.Cancelled, 1)
		a.runs.cut(r.ID) // here; another activator's attempt is cut at its next check
	}
	return a.runAnswer(r, err)
}

// runAnswer answers a run as JSON, or the error reading it.
func (a *Activator) runAnswer(r runs.Run, err error) runAnswer {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return failure(http.StatusNotFound, "no such run")
	case err != nil:
		return a.runsUnavailable(err)
	}
	return a.jsonAnswer(http.StatusOK, r)
}

// runResult answers an ended run's answer as the function gave it.
func (a *Activator) runResult(ctx context.Context, id runs.ID) runAnswer {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, res, err := a.runs.store.Result(sctx, id)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return failure(http.StatusNotFound, "no such run")
	case errors.Is(err, runs.ErrNotEnded) || err == nil && res.Status == 0:
		why := "the run is " + string(r.State) + ": it has no answer yet"
		if r.State.Ended() {
			why = "the run ended " + string(r.State) + " without an answer"
		}
		return failure(http.StatusConflict, why)
	case err != nil:
		return a.runsUnavailable(err)
	}
	return runAnswer{code: res.Status, contentType: res.ContentType, body: res.Body}
}

// runsUnavailable answers a read of the runs that failed: the store is
// out of reach for now.
func (a *Activator) runsUnavailable(err error) runAnswer {
	a.log.Warn("runs: the store could not be read", "err", err)
	return failure(http.StatusServiceUnavailable, "the runs cannot be read now: "+err.Error())
}
