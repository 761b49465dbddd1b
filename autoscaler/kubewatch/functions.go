package kubewatch

import (
	"context"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/scheduler"
)

// setFunction pushes a created or changed Function. The target gets it
// only when what the autoscaler needs of it changed, since SetFunction
// starts the function's decider afresh; a function new to the target gets
// its instances too, as the target knows none of a function it does not
// scale.
func (w *Watcher) setFunction(obj any) {
	fn, ok := obj.(*v1alpha1.Function)
	if !ok {
		return
	}
	fn = fn.DeepCopy()
	fn.Default()
	key := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	if errs := v1alpha1.Validate(fn, v1alpha1.ModeKubernetes); len(errs) > 0 {
		w.log.Info("not scaling an invalid function", "namespace", fn.Namespace, "function", fn.Name, "err", errs.ToAggregate())
		w.forget(key)
		return
	}
	want := autoscaler.FunctionFor(fn)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setCrons(key, fn)
	// The owner first: the target may decide as soon as it has the function.
	w.router.setOwner(key, ownedByKEDA(fn), w.replicas(key, fn))
	had, known := w.known[key]
	if known && reflect.DeepEqual(had, want) {
		return
	}
	w.known[key] = want
	w.target.SetFunction(time.Now(), want)
	if !known {
		w.pushInstances(key)
	}
}

// replicas is what a function has now: its Deployment's replicas, or its
// minimum before the controller has made one.
func (w *Watcher) replicas(key types.NamespacedName, fn *v1alpha1.Function) int32 {
	var dep appsv1.Deployment
	if err := w.cache.Get(context.Background(), key, &dep); err != nil || dep.Spec.Replicas == nil {
		return fn.Spec.Scale.Min
	}
	return *dep.Spec.Replicas
}

func (w *Watcher) removeFunction(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fn, ok := obj.(*v1alpha1.Function); ok {
		w.forget(types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name})
	}
}

// forget stops scaling a function that is deleted or no longer valid.
func (w *Watcher) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.router.remove(key)
	if _, known := w.crons[key]; known && w.Crons != nil {
		delete(w.crons, key)
		w.Crons.Remove(key.Namespace, key.Name)
	}
	if _, known := w.known[key]; known {
		delete(w.known, key)
		w.target.RemoveFunction(key.Namespace, key.Name)
	}
}

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
// w.mu held.
func (w *Watcher) setCrons(key types.NamespacedName, fn *v1alpha1.Function) {
	if w.Crons == nil {
		return
	}
	var specs []cronSpec
	for _, t := range fn.Spec.Triggers {
		if t.Cron != nil {
			specs = append(specs, cronSpec{Name: t.Name, Enabled: t.IsEnabled(), Cron: *t.Cron,
				Warm: fn.Spec.Scale.Min >= 1, Timeout: fn.Spec.TimeoutSeconds})
		}
	}
	had, known := w.crons[key]
	if known && reflect.DeepEqual(had, specs) || !known && specs == nil {
		return
	}
	triggers, err := scheduler.TriggersFor(fn)
	if err != nil {
		w.log.Warn("cron triggers not scheduled", "namespace", fn.Namespace, "function", fn.Name, "err", err) // validation parsed them
		return
	}
	w.crons[key] = specs
	w.Crons.Set(context.Background(), fn.Namespace, fn.Name, triggers)
}
