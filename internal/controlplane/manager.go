package controlplane

import (
	"context"
	"sync/atomic"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ForTests sets in mo what a manager in a test needs: no metrics port,
// and controllers that may be named again by the next test's manager in
// the same process.
func ForTests(mo *manager.Options) {
	mo.Metrics = metricsserver.Options{BindAddress: "0"}
	mo.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
}

// StartManager runs mgr until the test ends, the test failing if it
// stops with an error, and returns once its cache has synced, with the
// func that stops it sooner (the test's cleanup calls it too).
func StartManager(t testing.TB, mgr manager.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("manager cache did not sync")
	}
	return stop
}
