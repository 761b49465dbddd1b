// Package httpjson writes the JSON answers of the platform's net/http
// servers (the admin API, the activator's and the autoscaler's admin and
// push routes, the queue-proxy's admin port), so that every one answers
// with the same header and the same error shape, {"error": ...}.
//
// The Go function SDK (runtimes/go/sless) keeps its own: it is the user's
// module and depends on the standard library alone.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers v as JSON with code.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers {"error": msg} with code, as http.Error answers text.
func Error(w http.ResponseWriter, code int, msg string) {
	Write(w, code, map[string]string{"error": msg})
}
