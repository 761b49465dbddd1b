package autoscaler

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/internal/wire"
)

// maxPokeBody bounds what the poke endpoint reads.
const maxPokeBody = 4 << 10

// Handler serves what activators push to the autoscaler:
//
//	POST /v1/poke      wire.Poke            a request waits at zero
//	POST /v1/buffered  wire.BufferedReport  the requests waiting in one activator, every function
//	GET  /v1/scaling   []wire.Scaling       what it knows of every function
//
// A report's activator names the activator reporting (its pod): the counts
// of several activators add up, each expiring after BufferedTTL.
//
// With peers (WithPeers), a push for a function another replica scales is
// passed on to it, and GET /v1/scaling gathers every replica's functions.
//
// Only activators and peers may reach it (a NetworkPolicy does this on
// Kubernetes).
func (a *Autoscaler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+wire.PokePath, a.servePoke)
	mux.HandleFunc("POST "+wire.BufferedPath, a.serveBuffered)
	mux.HandleFunc("GET "+wire.ScalingPath, func(w http.ResponseWriter, r *http.Request) {
		out := a.Scaling(time.Now())
		if !a.relay.forwarded(r) {
			out = a.relay.scaling(r.Context(), out)
		}
		httpjson.Write(w, http.StatusOK, out)
	})
	return mux
}

func (a *Autoscaler) servePoke(w http.ResponseWriter, r *http.Request) {
	var req wire.Poke
	if !decode(w, r, &req, maxPokeBody) {
		return
	}
	if a.get(req.Namespace, req.Name) == nil && !a.relay.forwarded(r) {
		a.relay.poke(w, r, req)
		return
	}
	if a.get(req.Namespace, req.Name) == nil {
		httpjson.Error(w, http.StatusNotFound, "unknown function "+req.Namespace+"/"+req.Name)
		return
	}
	a.Poke(r.Context(), time.Now(), req.Namespace, req.Name, 1)
	w.WriteHeader(http.StatusNoContent)
}

// serveBuffered takes one activator's counts of every function. A report
// is checked whole before any count is taken; a function the autoscaler
// does not scale (removed, or not yet seen) does not keep the others'
// counts out.
func (a *Autoscaler) serveBuffered(w http.ResponseWriter, r *http.Request) {
	var rep wire.BufferedReport
	if !decode(w, r, &rep, wire.MaxBufferedBytes) {
		return
	}
	if len(rep.Functions) > wire.MaxBufferedBatch {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("at most %d functions a report", wire.MaxBufferedBatch))
		return
	}
	for _, c := range rep.Functions {
		if c.Count < 0 {
			httpjson.Error(w, http.StatusBadRequest, "count of "+c.Namespace+"/"+c.Name+" must not be negative")
			return
		}
	}
	now := time.Now()
	var unknown []wire.BufferedCount
	for _, c := range rep.Functions {
		if a.get(c.Namespace, c.Name) == nil {
			unknown = append(unknown, c)
			continue
		}
		a.SetBuffered(now, rep.Activator, c.Namespace, c.Name, c.Count)
	}
	var refused []string
	if a.relay.forwarded(r) {
		for _, c := range unknown {
			refused = append(refused, c.Namespace+"/"+c.Name)
		}
	} else {
		refused = a.relay.buffered(r.Context(), rep.Activator, unknown)
	}
	if len(refused) > 0 {
		httpjson.Error(w, http.StatusNotFound, "unknown function "+listed(refused, 10))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listed joins the first n of names, saying how many more there are.
func listed(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// decode reads r's JSON body, up to limit bytes, into v, or answers 400
// (413 beyond the limit) and reports false.
func decode(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is more than %d bytes", limit))
		return false
	}
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return false
	}
	return true
}
