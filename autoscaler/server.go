package autoscaler

import (
	"encoding/json"
	"net/http"
	"time"

	"sless.dev/sless/internal/wire"
)

// maxRequestBody bounds what the poke and buffered endpoints read.
const maxRequestBody = 4 << 10

// Handler serves what activators push to the autoscaler:
//
//	POST /v1/poke      {"namespace", "name"}                         a request waits at zero
//	POST /v1/buffered  {"namespace", "name", "count", "activator"}   requests waiting now
//	GET  /v1/scaling                                                  what it knows of every function (wire.Scaling)
//
// activator names the activator reporting (its pod): the counts of
// several activators add up, each expiring after BufferedTTL.
//
// Only activators may reach it (a NetworkPolicy does this on Kubernetes).
func (a *Autoscaler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/poke", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Namespace, Name string }
		if !decode(w, r, &req) {
			return
		}
		if a.get(req.Namespace, req.Name) == nil {
			writeError(w, http.StatusNotFound, "unknown function "+req.Namespace+"/"+req.Name)
			return
		}
		a.Poke(r.Context(), time.Now(), req.Namespace, req.Name, 1)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/buffered", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Namespace, Name, Activator string
			Count                      int
		}
		if !decode(w, r, &req) {
			return
		}
		if req.Count < 0 {
			writeError(w, http.StatusBadRequest, "count must not be negative")
			return
		}
		if a.get(req.Namespace, req.Name) == nil {
			writeError(w, http.StatusNotFound, "unknown function "+req.Namespace+"/"+req.Name)
			return
		}
		a.SetBuffered(time.Now(), req.Activator, req.Namespace, req.Name, req.Count)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+wire.ScalingPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Scaling(time.Now()))
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return false
	}
	return true
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
