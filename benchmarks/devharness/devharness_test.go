package devharness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/local"
	"sless.dev/sless/local/manifests"
)

// TestManifestsLoad checks that what the harness writes is what sless dev
// loads: names, namespaces, handlers, scale and triggers, and a source
// beside the manifests.
func TestManifestsLoad(t *testing.T) {
	r, err := newRun("devharness-test", Options{
		Files: map[string]string{"fn/main.py": "def handle(e):\n    return 'hi'\n"},
		Functions: []Manifest{
			{Namespace: "ns-1", Name: "f-0001", Runtime: v1alpha1.RuntimePython, Source: "./fn", Scale: "{min: 0, initial: 0}"},
			{Name: "wake", Runtime: v1alpha1.RuntimePython, Source: "./fn", Handler: "main.handle", Scale: "{initial: 0, max: 1, window: 1h}",
				Triggers: []string{`{name: tick, cron: {schedule: "@every 12s", preWarm: 3s}}`}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(r.dir) })
	fns, errs := manifests.Load(r.functions, manifests.LoadOptions{})
	if len(errs) > 0 || len(fns) != 2 {
		t.Fatalf("loaded %d functions, errors %v; want 2 and none", len(fns), errs)
	}
	wake, f1 := fns[0], fns[1] // sorted by key
	if wake.Key().String() != "default/wake" || f1.Key().String() != "ns-1/f-0001" {
		t.Fatalf("keys %s, %s; want default/wake, ns-1/f-0001", wake.Key(), f1.Key())
	}
	if s := wake.Spec.Scale; s.Max != 1 || s.Initial == nil || *s.Initial != 0 || len(wake.Spec.Triggers) != 1 || wake.Spec.Triggers[0].Cron == nil {
		t.Errorf("default/wake: scale %+v, triggers %+v", s, wake.Spec.Triggers)
	}
	if want := filepath.Join(r.functions, "fn"); f1.SourceDir != want {
		t.Errorf("ns-1/f-0001's source %s, want %s", f1.SourceDir, want)
	}
	if r.cache != filepath.Join(r.dir, "cache") {
		t.Errorf("cache %s, want one in the run's directory %s", r.cache, r.dir)
	}
}

func status(name string, state adminapi.State, ready int) local.FunctionStatus {
	return local.FunctionStatus{Status: adminapi.Status{Namespace: "default", Name: name, State: state, Ready: ready, Error: "why"}}
}

func TestWaitAll(t *testing.T) {
	ctx := context.Background()
	listOf := func(sts ...local.FunctionStatus) func(context.Context) ([]local.FunctionStatus, error) {
		return func(context.Context) ([]local.FunctionStatus, error) { return sts, nil }
	}
	if err := waitAll(ctx, listOf(status("a", adminapi.StateIdle, 0), status("b", adminapi.StateIdle, 0)), 2, time.Millisecond, time.Second, Idle); err != nil {
		t.Errorf("all idle: %v", err)
	}
	if err := waitAll(ctx, listOf(status("a", adminapi.StateReady, 1)), 1, time.Millisecond, time.Second, ReadyWith(1)); err != nil {
		t.Errorf("ready with 1: %v", err)
	}
	prepared := listOf(status("a", adminapi.StateIdle, 0), status("b", adminapi.StateStarting, 0), status("c", adminapi.StateReady, 1))
	if err := waitAll(ctx, prepared, 3, time.Millisecond, time.Second, Prepared); err != nil {
		t.Errorf("idle, starting and ready are prepared: %v", err)
	}
	if err := waitAll(ctx, listOf(status("a", adminapi.StateBuilding, 0)), 1, time.Millisecond, 20*time.Millisecond, Prepared); err == nil {
		t.Error("a function still building is prepared")
	}
	err := waitAll(ctx, listOf(status("a", adminapi.StateIdle, 0), status("b", adminapi.StateCrashing, 0)), 2, time.Millisecond, time.Minute, Idle)
	if err == nil || !strings.Contains(err.Error(), "default/b: crashing: why") {
		t.Errorf("a crashing function: %v, want the wait to end with its error", err)
	}
	err = waitAll(ctx, listOf(status("a", adminapi.StateIdle, 0), status("b", adminapi.StateBuilding, 0)), 2, time.Millisecond, 20*time.Millisecond, Idle)
	if err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("one still building: %v, want 1 of 2 after the time given", err)
	}
}
