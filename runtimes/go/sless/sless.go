// Package sless hosts a Go function behind HTTP by the sless runtime
// contract (docs/runtimes.md). The platform builds every Go function into
// a small program whose main serves the function's handler, in one of
// three forms:
//
//	func Handle(ctx context.Context, e sless.Event) (any, error) // Serve
//	func Handle(w http.ResponseWriter, r *http.Request)          // ServeHTTP
//	var Handle http.Handler = ...                                 // ServeHTTP
//
// This package imports the standard library only: it is compiled into
// every user function, which must not inherit sless's own dependencies.
package sless

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Event is one invocation: the HTTP request that caused it, whatever the
// trigger (an HTTP call, a cron fire, a queue message). It holds what the
// Python and Node runtimes hand their handlers, and has their JSON shape.
type Event struct {
	// Method is the request method, such as GET or POST.
	Method string
	// Path is the URL path, percent-decoded, without the query string.
	Path string
	// Query holds the query parameters; a repeated key keeps its first
	// value, as in the Python and Node runtimes.
	Query map[string]string
	// Headers holds the request headers by lower-case name (host
	// included), a repeated header's values joined with ", ".
	Headers map[string]string
	// Body is the whole request body; a queue message or a cron trigger's
	// body arrives here too.
	Body []byte
}

// Handler is the signature of a Go function that takes an Event. Its
// result becomes the response: a string is text (HTML when it starts with
// "<"), []byte is application/octet-stream, an io.Reader is streamed as
// application/octet-stream, nil is 204, a Response is what it says (its
// status, headers and body), anything else is JSON. An error, or a panic,
// is a 500 with {"error": "..."}. The context ends when the caller goes
// away.
type Handler func(ctx context.Context, e Event) (any, error)

// eventJSON is the event as every runtime writes it: the body as text,
// or as base64 when it is not UTF-8.
type eventJSON struct {
	Method          string            `json:"method"`
	Path            string            `json:"path"`
	Query           map[string]string `json:"query"`
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	IsBase64Encoded bool              `json:"isBase64Encoded"`
}

// MarshalJSON writes the event as the Python and Node runtimes do, so a
// handler that returns its event answers the same in every language.
func (e Event) MarshalJSON() ([]byte, error) {
	j := eventJSON{Method: e.Method, Path: e.Path, Query: e.Query, Headers: e.Headers, Body: string(e.Body)}
	if !utf8.Valid(e.Body) {
		j.Body, j.IsBase64Encoded = base64.StdEncoding.EncodeToString(e.Body), true
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(data []byte) error {
	var j eventJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	body := []byte(j.Body)
	if j.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(j.Body); err != nil {
			return fmt.Errorf("event body: %w", err)
		}
	}
	*e = Event{Method: j.Method, Path: j.Path, Query: j.Query, Headers: j.Headers, Body: body}
	return nil
}
