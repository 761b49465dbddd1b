package runs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runstest"
)

func TestMemory(t *testing.T) {
	runstest.TestStore(t, func(*testing.T) runs.Store { return runs.NewMemory() })
}

// A full in-memory store makes room by forgetting its oldest ended run,
// and refuses a run only when all it holds are queued or running.
func TestMemoryBounded(t *testing.T) {
	ctx := context.Background()
	m := runs.NewMemory()
	m.MaxRuns = 2
	sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "GET", Path: "/"}, MaxAge: time.Hour}
	first, _, _ := m.Submit(ctx, sub)
	m.Submit(ctx, sub)
	if _, _, err := m.Submit(ctx, sub); !errors.Is(err, runs.ErrFull) {
		t.Fatalf("a third run in a store of two, both queued: %v, want ErrFull", err)
	}
	a, _, _ := m.Claim(ctx, "default", "fn", time.Hour)
	if _, err := m.Finish(ctx, a, runs.Outcome{State: runs.Succeeded}); err != nil {
		t.Fatal(err)
	}
	if _, created, err := m.Submit(ctx, sub); err != nil || !created {
		t.Fatalf("a run once one ended: %v", err)
	}
	if _, err := m.Get(ctx, first.ID); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("the ended run: %v, want it forgotten", err)
	}
}
