package queueproxy

import (
	"encoding/json"

	"sless.dev/sless/internal/forward"
)

// errorBodies are the JSON bodies of the answers the queue-proxy gives
// itself. Those of overload are built once, so that it costs no
// allocation.
type errorBodies struct {
	namespace, function string
	queueFull, timeout  []byte
	tooLarge            []byte
}

func newErrorBodies(namespace, function string) errorBodies {
	e := errorBodies{namespace: namespace, function: function}
	e.queueFull = e.body("queue full: the function is at its concurrency limit and its queue is full")
	e.timeout = e.body("timed out waiting for the function")
	e.tooLarge = e.body(forward.ErrBodyTooLarge.Error())
	return e
}

// failure is the body of a call to the user process that failed.
func (e errorBodies) failure(f forward.Failure) []byte {
	return e.body(f.Message())
}

func (e errorBodies) body(msg string) []byte {
	b, _ := json.Marshal(struct {
		Error     string `json:"error"`
		Namespace string `json:"namespace"`
		Function  string `json:"function"`
	}{msg, e.namespace, e.function})
	return b
}
