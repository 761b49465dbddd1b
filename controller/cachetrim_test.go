package controller_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/cachetrim"
)

// The controller's cache keeps neither managed fields nor kubectl's
// last-applied annotation of a Function, and its writes (statuses) leave
// both as they are on the server: kubectl apply still merges.
func TestCacheTrimmed(t *testing.T) {
	e := newEnv(t)
	run := e.start(t, testOptions, true, nil)
	ns := e.namespace(t)
	applied := `{"apiVersion":"sless.dev/v1alpha1","kind":"Function"}`
	e.create(t, newFunction(ns, "applied", func(fn *v1alpha1.Function) {
		fn.Annotations = map[string]string{cachetrim.LastAppliedAnnotation: applied, "team": "a"}
	}))
	e.waitCondition(t, ns, "applied", v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
	e.markAvailable(t, ns, "applied")
	e.waitCondition(t, ns, "applied", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	key := types.NamespacedName{Namespace: ns, Name: "applied"}
	var cached, stored v1alpha1.Function
	if err := run.mgr.GetCache().Get(context.Background(), key, &cached); err != nil {
		t.Fatal(err)
	}
	if cached.ManagedFields != nil || len(cached.Annotations) != 1 || cached.Annotations["team"] != "a" {
		t.Errorf("cached: managed fields %v, annotations %v; want none, and team alone", cached.ManagedFields, cached.Annotations)
	}
	if err := e.c.Get(context.Background(), key, &stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.ManagedFields) == 0 || stored.Annotations[cachetrim.LastAppliedAnnotation] != applied || stored.Annotations["team"] != "a" {
		t.Errorf("stored after the controller's writes: managed fields %v, annotations %v; want them kept", stored.ManagedFields, stored.Annotations)
	}
}
