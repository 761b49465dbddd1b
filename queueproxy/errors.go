package queueproxy

import (
	"encoding/json"

	"sless.dev/sless/internal/forward"
)

// errorBodies are the JSON bodies of the answers the queue-proxy gives
// itself, built once so that overload costs no allocation.
type errorBodies struct {
	namespace, function  string
	queueFull, timeout   []byte
	tooLarge, badRequest []byte
}

func newErrorBodies(namespace, function string) errorBodies {
	e := errorBodies{namespace: namespace, function: function}
	e.queueFull = e.body("queue full: the function is at its concurrency limit and its queue is full")
	e.timeout = e.body("timed out waiting for the function")
	e.tooLarge = e.body("request body too large")
	e.badRequest = e.body("malformed request")
	return e
}

func (e errorBodies) upstream(err error) []byte {
	return e.body("function failed: " + forward.Cause(err))
}

func (e errorBodies) body(msg string) []byte {
	b, _ := json.Marshal(struct {
		Error     string `json:"error"`
		Namespace string `json:"namespace"`
		Function  string `json:"function"`
	}{msg, e.namespace, e.function})
	return b
}
