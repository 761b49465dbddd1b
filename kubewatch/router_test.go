package kubewatch_test

import (
	"context"
	"errors"
	"testing"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kedascaler"
	"sless.dev/sless/kubewatch"
)

// countingWriter counts the writes that reach it.
type countingWriter struct{ writes int }

func (w *countingWriter) Scale(context.Context, string, string, int32) (int32, error) {
	w.writes++
	return 0, nil
}

// A function this replica does not scale now is not written, whatever
// decided it: the fence of a replica whose share moved or lapsed.
func TestRouterWritesOnlyWhatItOwns(t *testing.T) {
	w := &countingWriter{}
	r := kubewatch.NewReplicaRouter(w, kedascaler.New(quiet))
	r.Owns = func(_, name string) bool { return name == "mine" }
	if _, err := r.Scale(t.Context(), "default", "theirs", 3); !errors.Is(err, autoscaler.ErrNotScaledHere) {
		t.Errorf("write of a function scaled elsewhere: %v, want ErrNotScaledHere", err)
	}
	if w.writes != 0 {
		t.Errorf("%d writes reached the cluster for a function scaled elsewhere", w.writes)
	}
	if _, err := r.Scale(t.Context(), "default", "mine", 3); errors.Is(err, autoscaler.ErrNotScaledHere) {
		t.Errorf("write of a function scaled here refused as elsewhere: %v", err)
	}
}
