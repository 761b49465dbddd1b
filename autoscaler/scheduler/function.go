package scheduler

import (
	"fmt"
	"time"

	"sless.dev/sless/apis/v1alpha1"
)

// TriggersFor is what the scheduler needs of a defaulted Function's cron
// triggers, the same on Kubernetes and in sless dev. A function that keeps
// an instance (min ≥ 1) needs no warm-up.
func TriggersFor(fn *v1alpha1.Function) ([]Trigger, error) {
	var out []Trigger
	for _, t := range fn.Spec.Triggers {
		if t.Cron == nil {
			continue
		}
		s, loc, err := t.Cron.ParseSchedule()
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", t.Name, err)
		}
		var preWarm time.Duration
		if t.Cron.PreWarm != nil && fn.Spec.Scale.Min < 1 {
			preWarm = t.Cron.PreWarm.Duration
		}
		out = append(out, Trigger{Namespace: fn.Namespace, Function: fn.Name, Name: t.Name, Schedule: s, Location: loc,
			PreWarm: preWarm, Body: t.Cron.Body, Timeout: time.Duration(fn.Spec.TimeoutSeconds) * time.Second})
	}
	return out, nil
}
