package adminapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/runs"
)

// RunList is the answer of GET .../functions/{name}/runs: a page of the
// function's runs, the newest first. Next, when set, is the query of the
// next page.
type RunList struct {
	Runs []runs.Run `json:"runs"`
	Next string     `json:"next,omitempty"`
}

// RunView is the answer of GET /v1/runs/{id}: the run, and once it ended
// with an answer, that answer.
type RunView struct {
	runs.Run
	Result *RunResult `json:"result,omitempty"`
}

// RunResult is a run's answer as the admin API shows it: its body as
// text, up to maxShownBody; a body that is not UTF-8 text is not shown
// (Binary), the activator's /runs/{id}/result serves it whole.
type RunResult struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        string `json:"body,omitempty"`
	// Size is the body's whole size; Truncated says Body holds its start.
	Size      int64 `json:"size"`
	Truncated bool  `json:"truncated,omitempty"`
	Binary    bool  `json:"binary,omitempty"`
}

// storeTimeout bounds a call of the run store.
const storeTimeout = 10 * time.Second

// handleRuns serves the runs of store on mux, behind the admin API's
// token: listing a function's runs, reading one by id. Without a store
// (an activator without a database) they answer 501, saying why.
func (h handler[S]) handleRuns(mux *http.ServeMux, store runs.Store) {
	if store == nil {
		none := func(w http.ResponseWriter, _ *http.Request) {
			WriteError(w, &Error{http.StatusNotImplemented, "no runs are kept here: the activators keep them with --database-url"})
		}
		mux.HandleFunc("GET "+FunctionRoute+"/runs", none)
		mux.HandleFunc("GET /v1/runs/{id}", none)
		return
	}
	mux.HandleFunc("GET "+FunctionRoute+"/runs", func(w http.ResponseWriter, r *http.Request) { h.listRuns(w, r, store) })
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) { getRun(w, r, store) })
}

// listRuns answers ?state=, ?limit=, and ?before= with ?beforeId= (the
// last run's createdAt and id, as RunList.Next gives them).
func (h handler[S]) listRuns(w http.ResponseWriter, r *http.Request, store runs.Store) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	q, err := runQuery(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	list, err := store.List(ctx, ns, name, q)
	if err != nil {
		WriteError(w, err)
		return
	}
	if len(list) == 0 { // a function removed keeps its runs for their retention
		if _, err := h.b.Function(ctx, ns, name); err != nil {
			WriteError(w, err)
			return
		}
	}
	out := RunList{Runs: list}
	if len(list) == q.LimitOrDefault() {
		next := r.URL.Query()
		last := list[len(list)-1]
		next.Set("before", last.CreatedAt.Format(time.RFC3339Nano))
		next.Set("beforeId", string(last.ID))
		out.Next = "?" + next.Encode()
	}
	if out.Runs == nil {
		out.Runs = []runs.Run{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

func runQuery(r *http.Request) (runs.Query, error) {
	v := r.URL.Query()
	q := runs.Query{State: runs.State(v.Get("state"))}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return q, BadInput("limit is a number of runs, not %q", s)
		}
		q.Limit = n
	}
	if s := v.Get("before"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, BadInput("before is a time such as 2026-12-07T13:00:00Z, not %q", s)
		}
		q.Before, q.BeforeID = t, runs.ID(v.Get("beforeId"))
	}
	if err := q.Check(); err != nil {
		return q, BadInput("%v", err)
	}
	return q, nil
}

// getRun answers a run by id, with its answer once it ended.
func getRun(w http.ResponseWriter, r *http.Request, store runs.Store) {
	id := r.PathValue("id")
	if !runs.ValidID(id) {
		WriteError(w, NotFound("no such run"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	run, res, err := store.Result(ctx, runs.ID(id))
	switch {
	case errors.Is(err, runs.ErrNotFound):
		WriteError(w, NotFound("no such run"))
		return
	case err != nil && !errors.Is(err, runs.ErrNotEnded):
		WriteError(w, err)
		return
	}
	view := RunView{Run: run}
	if err == nil && res.Status > 0 {
		view.Result = shownResult(res)
	}
	httpjson.Write(w, http.StatusOK, view)
}

func shownResult(res runs.Result) *RunResult {
	out := &RunResult{Status: res.Status, ContentType: res.ContentType, Size: res.BodySize, Truncated: res.Truncated}
	if out.Size == 0 {
		out.Size = int64(len(res.Body))
	}
	body := res.Body
	if len(body) > maxShownBody {
		body, out.Truncated = body[:maxShownBody], true
	}
	if out.Truncated { // a cut may have split the last character
		for i := 0; i < utf8.UTFMax-1 && len(body) > 0 && !utf8.Valid(body); i++ {
			body = body[:len(body)-1]
		}
	}
	if !utf8.Valid(body) {
		out.Binary = true
		return out
	}
	out.Body = string(body)
	return out
}
