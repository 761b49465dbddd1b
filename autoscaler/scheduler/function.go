package scheduler

import (
	"fmt"
	"time"

	"sless.dev/sless/apis/v1alpha1"
)

// TriggersFor is what the scheduler needs of a defaulted Function's cron
// triggers, the same on Kubernetes and in sless dev. A function that keeps
// an instance (min ≥ 1) needs no warm-up; one whose preWarm is unset is
// warmed for its measured start-up (AutoPreWarm).
func TriggersFor(fn *v1alpha1.Function) ([]Trigger, error) {
	var out []Trigger
	for _, t := range fn.Spec.Triggers {
		if t.Cron == nil || !t.IsEnabled() {
			continue
		}
		s, loc, err := t.Cron.ParseSchedule()
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", t.Name, err)
		}
		tr := Trigger{Namespace: fn.Namespace, Function: fn.Name, Name: t.Name, Schedule: s, Location: loc,
			Body: t.Cron.Body, Timeout: time.Duration(fn.Spec.TimeoutSeconds) * time.Second}
		switch {
		case fn.Spec.Scale.Min >= 1:
		case t.Cron.PreWarm == nil:
			tr.AutoPreWarm = true
		default:
			tr.PreWarm = t.Cron.PreWarm.Duration
		}
		out = append(out, tr)
	}
	return out, nil
}
