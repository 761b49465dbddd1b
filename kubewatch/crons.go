package kubewatch

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler/scheduler"
)

// cronSpec is what a function's schedule depends on: a change of anything
// else (its status, its image) must not reschedule it.
type cronSpec struct {
	Name    string
	Enabled bool
	Cron    v1alpha1.CronTrigger
	Warm    bool // min ≥ 1: no pre-warm
	Timeout int32
}

// setCrons gives Crons fn's cron triggers when they changed. Called with
// f.mu held.
func (f *AutoscalerFeed) setCrons(key types.NamespacedName, fn *v1alpha1.Function) {
	if f.Crons == nil {
		return
	}
	var specs []cronSpec
	for _, t := range fn.Spec.Triggers {
		if t.Cron != nil {
			specs = append(specs, cronSpec{Name: t.Name, Enabled: t.IsEnabled(), Cron: *t.Cron,
				Warm: fn.Spec.Scale.Min >= 1, Timeout: fn.Spec.TimeoutSeconds})
		}
	}
	had, known := f.crons[key]
	if known && reflect.DeepEqual(had, specs) || !known && specs == nil {
		return
	}
	triggers, err := scheduler.TriggersFor(fn)
	if err != nil {
		f.feed.log.Warn("cron triggers not scheduled", "namespace", fn.Namespace, "function", fn.Name, "err", err) // validation parsed them
		return
	}
	f.crons[key] = specs
	f.Crons.Set(context.Background(), fn.Namespace, fn.Name, triggers)
}
