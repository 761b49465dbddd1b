package kubewatch

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
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
	// The owner first: the target may decide as soon as it has the function.
	w.router.setOwner(key, ownedByKEDA(fn))
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
	if _, known := w.known[key]; known {
		delete(w.known, key)
		w.target.RemoveFunction(key.Namespace, key.Name)
	}
}
