package runtimes

import (
	"context"
	"errors"
)

// prepareGo is replaced by the Go runtime's builder (issue 7).
func prepareGo(ctx context.Context, src Source, opts Options) (Process, error) {
	return Process{}, errors.New("go runtime: not built yet")
}
