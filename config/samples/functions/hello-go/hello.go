// Package hello greets the caller, by name when ?name= is given: the Go
// twin of hello-python and hello-node, with the same answer.
package hello

import (
	"context"

	"sless.dev/sless/runtimes/go/sless"
)

// Handle answers {"message": "hello <name>", "runtime": "go", "method": ...}.
func Handle(ctx context.Context, e sless.Event) (any, error) {
	name := e.Query["name"]
	if name == "" {
		name = "world"
	}
	return map[string]string{"message": "hello " + name, "runtime": "go", "method": e.Method}, nil
}
