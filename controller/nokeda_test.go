package controller_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

// TestWithoutKEDA removes KEDA's CRDs from the API server: the controller
// still starts and runs functions the autoscaler scales, and reports that
// those needing KEDA cannot be scaled.
func TestWithoutKEDA(t *testing.T) {
	e := newEnv(t)
	if installed, err := controller.KEDAInstalled(e.cfg); err != nil || !installed {
		t.Fatalf("KEDAInstalled with KEDA's CRDs = %v, %v", installed, err)
	}
	crds := controlplane.Client(t, e.cfg, apiextensionsv1.AddToScheme)
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := crds.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Spec.Group == "keda.sh" {
			if err := crds.Delete(context.Background(), &list.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually.True(t, "KEDA's CRDs gone from discovery", func() bool {
		installed, err := controller.KEDAInstalled(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return !installed
	})

	opts := testOptions
	opts.KEDA = false
	e.start(t, opts, true, nil)
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "plain"))
	e.create(t, newFunction(ns, "keda", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA }))

	e.waitCondition(t, ns, "plain", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, controller.ReasonAutoscaler)
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionScalingReady, metav1.ConditionFalse, controller.ReasonKEDANotInstalled)
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionReady, metav1.ConditionFalse, controller.ReasonKEDANotInstalled)
	e.waitEvent(t, ns, "keda", controller.ReasonKEDANotInstalled, "KEDA")
	for _, name := range []string{"plain", "keda"} {
		waitObject(t, e, ns, name, &appsv1.Deployment{})
	}
}
