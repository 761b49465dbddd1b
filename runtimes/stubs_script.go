package runtimes

import (
	"context"
	"errors"
)

// preparePython and prepareNode are replaced by the script runtimes (issue 7).
func preparePython(ctx context.Context, src Source, opts Options) (Process, error) {
	return Process{}, errors.New("python runtime: not built yet")
}

func prepareNode(ctx context.Context, src Source, opts Options) (Process, error) {
	return Process{}, errors.New("node runtime: not built yet")
}
