// Package web is a Go function written as net/http serves, the Go idiom:
// it chooses its status and headers, streams events with http.Flusher,
// and takes over a connection for a WebSocket. Its twins http-python and
// http-node answer the same, but for the WebSocket.
package web

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pixel is a 1×1 PNG.
var pixel, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

// Handle answers GET /orders/7 with the order, any other order with a 404
// and two cookies, /pixel.png with an image, /events?n=&every= with n
// events (1 to 100), one every `every` (up to 60s), and /chat with a
// WebSocket that echoes each message.
func Handle(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/orders/7":
		writeJSON(w, http.StatusOK, map[string]string{"id": "7", "item": "tea"})
	case strings.HasPrefix(r.URL.Path, "/orders/"):
		http.SetCookie(w, &http.Cookie{Name: "a", Value: "1", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "b", Value: "2", Path: "/"})
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no order " + strings.TrimPrefix(r.URL.Path, "/orders/")})
	case r.URL.Path == "/pixel.png":
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pixel)
	case r.URL.Path == "/events":
		events(w, r)
	case r.URL.Path == "/chat":
		chat(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no route " + r.URL.Path})
	}
}

func events(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	every, everyErr := time.ParseDuration(r.URL.Query().Get("every"))
	if err != nil || n < 1 || n > 100 || everyErr != nil || every < 0 || every > time.Minute {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want ?n= from 1 to 100 and ?every= up to 60s, such as ?n=3&every=1s"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range n {
		if i > 0 {
			select {
			case <-time.After(every):
			case <-r.Context().Done():
				return // the caller left
			}
		}
		fmt.Fprintf(w, "data: %d\n\n", i)
		w.(http.Flusher).Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
