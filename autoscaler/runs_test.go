package autoscaler_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/runs"
)

// A function at zero with runs due is started, with as many instances as
// its runs in flight need at its target, up to its runs' concurrency; runs
// waiting for a later retry ask for none.
func TestRunsAskForInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := runs.NewMemory()
		w := &recordingWriter{writes: map[string][]int32{}}
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), w, prometheus.NewRegistry(), slog.New(slog.DiscardHandler),
			autoscaler.WithRuns(store, slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		run, stop := context.WithCancel(t.Context())
		defer stop()
		go a.Run(run)
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: "fn", RunConcurrency: 5,
			Spec: kpa.Spec{Max: 10, Target: 2, StableWindow: time.Minute}})
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: "later", RunConcurrency: 5,
			Spec: kpa.Spec{Max: 10, Target: 2, StableWindow: time.Minute}})
		sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "GET", Path: "/"}, MaxAge: time.Hour}
		for range 7 {
			if _, _, err := store.Submit(ctx, sub); err != nil {
				t.Fatal(err)
			}
		}
		sub.Function = "later"
		if _, _, err := store.Submit(ctx, sub); err != nil {
			t.Fatal(err)
		}
		as, err := store.Claim(ctx, "default", "later", time.Hour, 3, 1)
		if err != nil || len(as) != 1 {
			t.Fatalf("claim: %d attempts, %v", len(as), err)
		}
		if _, err := store.Finish(ctx, as[0], runs.Outcome{State: runs.Queued, RetryAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := w.last("fn"); got != 3 {
			t.Errorf("fn: %d instances, want 3: five runs in flight at most, two an instance", got)
		}
		if got := w.last("later"); got > 0 {
			t.Errorf("later: %d instances, want none for a run due in an hour", got)
		}
	})
}
