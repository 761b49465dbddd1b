// Package nilderef dereferences a nil pointer when ?nil=1 is asked, the
// most common Go crash. The runtime recovers the panic into a 500 with
// {"error": "panic: runtime error: invalid memory address or nil pointer
// dereference"} and the process goes on serving: the next request answers
// 200 from the same pid.
package nilderef

import (
	"context"
	"fmt"
	"os"

	"sless.dev/sless/runtimes/go/sless"
)

type greeter struct{ greeting string }

// Handle answers {"greeting": "hello", "pid": ...}, or panics on ?nil=1.
func Handle(ctx context.Context, e sless.Event) (any, error) {
	g := &greeter{greeting: "hello"}
	switch e.Query["nil"] {
	case "", "0":
	case "1":
		g = nil // as if a lookup had found nothing
	default:
		return nil, fmt.Errorf("nil must be 0 or 1, not %q", e.Query["nil"])
	}
	return map[string]any{"greeting": g.greeting, "pid": os.Getpid()}, nil
}
