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
	a := claimOne(t, m)
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

// The in-memory store bounds the bytes of the requests and results it
// holds: a run's request is dropped as it ends, and ended runs are
// forgotten, oldest first, to make room.
func TestMemoryBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	m := runs.NewMemory()
	m.MaxBytes = 1000
	sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "POST", Path: "/",
		Body: make([]byte, 600)}, MaxAge: time.Hour}
	if _, _, err := m.Submit(ctx, sub); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Submit(ctx, sub); !errors.Is(err, runs.ErrFull) {
		t.Fatalf("a second 600 bytes in 1000, the first queued: %v, want ErrFull", err)
	}
	a := claimOne(t, m)
	if _, err := m.Finish(ctx, a, runs.Outcome{State: runs.Succeeded, Result: runs.Result{Status: 200, Body: make([]byte, 300)}}); err != nil {
		t.Fatal(err)
	}
	second, _, err := m.Submit(ctx, sub)
	if err != nil {
		t.Fatalf("600 bytes once the first run's request was dropped: %v", err)
	}
	if _, _, err := m.Result(ctx, a.Run.ID); err != nil {
		t.Errorf("the first run's result: %v, want it kept while there is room", err)
	}
	b := claimOne(t, m)
	if _, err := m.Finish(ctx, b, runs.Outcome{State: runs.Succeeded, Result: runs.Result{Status: 200, Body: make([]byte, 300)}}); err != nil ||
		b.Run.ID != second.ID {
		t.Fatal(err)
	}
	if _, _, err := m.Submit(ctx, sub); err != nil {
		t.Fatalf("a third run, room made by forgetting the first: %v", err)
	}
	if _, err := m.Get(ctx, a.Run.ID); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("the first run: %v, want it forgotten to make room", err)
	}
	if _, _, err := m.Result(ctx, second.ID); err != nil {
		t.Errorf("the second run: %v, want it kept", err)
	}
}

// claimOne claims the run of default/fn due first, failing when none is.
func claimOne(t *testing.T, m *runs.Memory) runs.Attempt {
	t.Helper()
	as, err := m.Claim(context.Background(), "default", "fn", time.Hour, 3, 1)
	if err != nil || len(as) != 1 {
		t.Fatalf("claim: %d attempts, %v", len(as), err)
	}
	return as[0]
}
