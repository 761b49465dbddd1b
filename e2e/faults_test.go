//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/load"
)

// Under 200 requests a second, a new function image, a rollout of the
// activators, a function pod deleted and an activator pod deleted fail no
// request: instances going away are drained, activators going away take
// new connections until their endpoints drop them, then drain.
func TestFaultsUnderLoad(t *testing.T) {
	ns := namespace(t, "e2e-faults")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "steady", "go", "hello-go", "Handle",
		"  scale: {min: 2, initial: 2, max: 4}\n"))
	waitFor(t, "steady answering with two instances", func() bool {
		code, _, err := invoke(ns, "steady", "")
		return err == nil && code == 200 && readyPods(t, ns, "steady") == 2
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan load.Result, 1)
	go func() {
		r, err := load.Run(ctx, load.Options{URL: cluster.activator + "/fn/" + ns + "/steady", Rate: 200,
			Duration: time.Hour, Connections: 64, Timeout: time.Minute, AllowRemote: true})
		if err != nil {
			t.Errorf("load: %v", err)
		}
		ran <- r
	}()

	step := func(what string, do func()) {
		t.Logf("under load: %s", what)
		do()
	}
	step("a new image of the function", func() {
		var fn v1alpha1.Function
		if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "steady"}, &fn); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(fn.DeepCopy())
		fn.Spec.Env = append(fn.Spec.Env, corev1.EnvVar{Name: "VERSION", Value: "2"})
		if err := cluster.c.Patch(context.Background(), &fn, patch); err != nil {
			t.Fatal(err)
		}
		waitRolledOut(t, ns, "steady")
	})
	step("a rollout of the activators", func() { restartActivators(t) })
	step("a function pod deleted", func() {
		deletePod(t, pods(t, ns, "steady")[0])
		waitFor(t, "two instances again", func() bool { return readyPods(t, ns, "steady") == 2 })
	})
	step("an activator pod deleted", func() {
		var list corev1.PodList
		if err := cluster.c.List(context.Background(), &list, client.InNamespace("sless-system"),
			client.MatchingLabels{"app.kubernetes.io/name": "sless-activator"}); err != nil || len(list.Items) == 0 {
			t.Fatalf("activator pods: %v", err)
		}
		gone := list.Items[0]
		deletePod(t, gone)
		waitFor(t, "the activator pod gone and the activators available again", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := cluster.c.Get(ctx, client.ObjectKeyFromObject(&gone), &corev1.Pod{})
			return apierrors.IsNotFound(err) && waitAvailable(ctx, "sless-system", "sless-activator") == nil
		})
	})
	stop()
	r := <-ran
	if r.Requests < 1000 || r.Errors != 0 || r.Codes[200] != r.Requests {
		t.Errorf("%d answers, %d without one (%v), codes %v: want every request answered 200", r.Requests, r.Errors, r.TransportErrors, r.Codes)
	}
}

// waitRolledOut waits for a function's Deployment to run its latest spec
// on every replica.
func waitRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, name+" rolled out", func() bool {
		var d appsv1.Deployment
		err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d)
		return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Spec.Replicas != nil &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas &&
			d.Status.AvailableReplicas == *d.Spec.Replicas
	})
}

// deletePod deletes a pod as kubectl delete does: with its grace period.
func deletePod(t *testing.T, p corev1.Pod) {
	t.Helper()
	if err := cluster.c.Delete(context.Background(), &p); err != nil {
		t.Fatalf("delete pod %s: %v", p.Name, err)
	}
}
