package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
)

// manyFunctions is how many Functions TestManyFunctions creates at once.
// Polling lists them all, so it polls at a slower pace than other tests.
const manyFunctions = 500

// TestManyFunctions creates 500 Functions at once and waits until every one
// has its Deployment, its Service and a status for its generation. The
// time it takes is logged, for benchmarks/RESULTS.md.
func TestManyFunctions(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 500 Functions; skipped with -short")
	}
	e := newEnv(t)
	opts := testOptions
	opts.Workers = 0 // the default, as deployed
	e.start(t, opts, true, nil)
	ns := e.namespace(t)

	start := time.Now()
	names := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range names {
				if err := e.c.Create(context.Background(), newFunction(ns, name)); err != nil {
					t.Errorf("create %s: %v", name, err)
				}
			}
		})
	}
	for i := range manyFunctions {
		names <- fmt.Sprintf("fn-%03d", i)
	}
	close(names)
	wg.Wait()
	created := time.Since(start)

	count := func(list client.ObjectList) int {
		if err := e.c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return meta.LenList(list)
	}
	eventually.TrueWithin(t, 5*time.Minute, "every Function's Deployment and Service", func() bool {
		return count(&appsv1.DeploymentList{}) == manyFunctions && count(&corev1.ServiceList{}) == manyFunctions
	})
	objects := time.Since(start)
	eventually.TrueWithin(t, 5*time.Minute, "every Function's status", func() bool {
		var list v1alpha1.FunctionList
		if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, fn := range list.Items {
			if fn.Status.ObservedGeneration == fn.Generation && meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady) != nil {
				done++
			}
		}
		return done == manyFunctions
	})
	t.Logf("%d Functions: created in %v, all Deployments and Services after %v, all statuses after %v",
		manyFunctions, created.Round(time.Millisecond), objects.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
