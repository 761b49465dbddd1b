// Package cachesync bounds the first sync of a Kubernetes watch. A watch
// that cannot list (its ServiceAccount lacks RBAC, or the API server is out
// of reach) retries forever without a word, leaving a component waiting
// unready, or a leader holding its Lease and doing nothing; bounded, it
// fails instead and names what to check.
package cachesync

import (
	"context"
	"fmt"
	"time"
)

// DefaultTimeout is how long a first sync may take before it is given up.
const DefaultTimeout = 2 * time.Minute

// Wait calls synced with a context that ends after timeout, and returns
// nil when synced reports the caches synced, ctx's error when ctx ended
// first, and otherwise an error saying that component's ServiceAccount may
// need to list and watch what.
func Wait(ctx context.Context, timeout time.Duration, synced func(context.Context) bool, component, what string) error {
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if synced(syncCtx) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	return fmt.Errorf("%s did not sync within %v: check that the %s's ServiceAccount may list and watch them",
		what, timeout, component)
}
