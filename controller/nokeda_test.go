package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

// TestWithoutKEDA removes KEDA's CRDs from the API server: the controller
// still starts and runs functions the autoscaler scales, and reports that
// those needing KEDA cannot be scaled. Then KEDA is installed: the watch
// stops, asking for the restart after which the Functions needing KEDA get
// their ScaledObject; and removed again: the watch of a controller set up
// with KEDA stops too.
func TestWithoutKEDA(t *testing.T) {
	e := newEnv(t)
	if installed, err := controller.KEDAInstalled(e.cfg); err != nil || !installed {
		t.Fatalf("KEDAInstalled with KEDA's CRDs = %v, %v", installed, err)
	}
	crds := controlplane.Client(t, e.cfg, apiextensionsv1.AddToScheme)
	keda := removeKEDA(t, crds)
	waitKEDA(t, e, false)

	watchStopped := watchKEDA(t, e, false)
	opts := testOptions
	opts.KEDA = false
	run := e.start(t, opts, true, nil)
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "plain"))
	e.create(t, newFunction(ns, "keda", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA }))

	e.waitCondition(t, ns, "plain", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonAutoscaler)
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionScalingReady, metav1.ConditionFalse, v1alpha1.ReasonKEDANotInstalled)
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonKEDANotInstalled)
	e.waitEvent(t, ns, "keda", v1alpha1.ReasonKEDANotInstalled, "KEDA")
	for _, name := range []string{"plain", "keda"} {
		waitObject(t, e, ns, name, &appsv1.Deployment{})
	}

	select {
	case err := <-watchStopped:
		t.Fatalf("the KEDA watch stopped while KEDA stayed away: %v", err)
	default:
	}
	installKEDA(t, crds, keda)
	waitStop(t, watchStopped, "served now")

	// What the Deployment's restart brings: a manager set up with KEDA.
	run.stop()
	e.start(t, testOptions, true, nil)
	waitObject(t, e, ns, "keda", &kedav1alpha1.ScaledObject{})
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionScalingReady, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForKEDA)

	watchStopped = watchKEDA(t, e, true)
	removeKEDA(t, crds)
	waitStop(t, watchStopped, "no longer served")
}

// removeKEDA deletes KEDA's CRDs, waits until they are gone, and returns
// them, to install again.
func removeKEDA(t *testing.T, crds client.Client) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := context.Background()
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := crds.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var keda []apiextensionsv1.CustomResourceDefinition
	for i := range list.Items {
		crd := &list.Items[i]
		if crd.Spec.Group != kedav1alpha1.GroupVersion.Group {
			continue
		}
		keda = append(keda, *crd)
		// A list waits until the kind's storage is ready. A CRD deleted
		// before that stays (the API server cannot list its objects to
		// delete them, "storage is (re)initializing") for minutes.
		objects := &unstructured.UnstructuredList{}
		objects.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Kind: crd.Spec.Names.ListKind})
		if err := crds.List(ctx, objects); err != nil {
			t.Fatalf("list %s: %v", crd.Spec.Names.Plural, err)
		}
		if err := crds.Delete(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	if len(keda) == 0 {
		t.Fatal("no KEDA CRDs to remove")
	}
	for _, crd := range keda {
		eventually.True(t, "CRD "+crd.Name+" deleted", func() bool {
			err := crds.Get(ctx, client.ObjectKeyFromObject(&crd), &apiextensionsv1.CustomResourceDefinition{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			return apierrors.IsNotFound(err)
		})
	}
	return keda
}

// installKEDA creates the CRDs removeKEDA returned, as new objects.
func installKEDA(t *testing.T, crds client.Client, keda []apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	for _, crd := range keda {
		fresh := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: crd.Name, Labels: crd.Labels, Annotations: crd.Annotations},
			Spec:       crd.Spec,
		}
		if err := crds.Create(context.Background(), fresh); err != nil {
			t.Fatalf("create CRD %s: %v", crd.Name, err)
		}
	}
}

// waitKEDA waits until discovery says KEDA is installed, or not.
func waitKEDA(t *testing.T, e *env, installed bool) {
	t.Helper()
	eventually.True(t, "KEDA's CRDs in discovery or not", func() bool {
		got, err := controller.KEDAInstalled(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return got == installed
	})
}

// watchKEDA runs a KEDAWatch that checks often, for as long as the test,
// and returns what its Start returns.
func watchKEDA(t *testing.T, e *env, installed bool) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		w := &controller.KEDAWatch{Config: e.cfg, Installed: installed, Every: 50 * time.Millisecond}
		stopped <- w.Start(ctx)
	}()
	t.Cleanup(cancel)
	return stopped
}

// waitStop waits for a KEDAWatch to stop with ErrKEDAChanged saying KEDA's
// kinds are what now says.
func waitStop(t *testing.T, stopped <-chan error, now string) {
	t.Helper()
	select {
	case err := <-stopped:
		if !errors.Is(err, controller.ErrKEDAChanged) || !strings.Contains(err.Error(), "TriggerAuthentications are "+now) {
			t.Fatalf("KEDA watch stopped with %v, want ErrKEDAChanged saying KEDA's kinds are %s", err, now)
		}
	case <-time.After(eventually.Within):
		t.Fatalf("the KEDA watch did not notice KEDA's kinds %s within %v", now, eventually.Within)
	}
}
