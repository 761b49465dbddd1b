//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/invocation"
)

// scaleAutoscaler sets the autoscaler's replicas and waits until they all
// are ready, sharing the functions.
func scaleAutoscaler(t *testing.T, replicas int32) {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := cluster.c.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-autoscaler"}, &d); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(replicas)
	if err := cluster.c.Patch(ctx, &d, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the autoscaler's replicas ready", func() bool {
		var now appsv1.Deployment
		err := cluster.c.Get(ctx, client.ObjectKeyFromObject(&d), &now)
		return err == nil && now.Status.ObservedGeneration >= now.Generation && now.Status.Replicas == replicas &&
			now.Status.ReadyReplicas == replicas
	})
}

// With two autoscaler replicas (as config/autoscaler deploys them), a
// cron trigger fires once per time, and
// pre-warm has an instance ready for the fire: no fire waits for a start,
// though the function is at zero, without a pod, between fires.
func TestCronOnceWarm(t *testing.T) {
	scaleAutoscaler(t, 2)
	ns := namespace(t, "e2e-cron")
	// Idle 6 s after a fire, the function goes to zero and its pod leaves
	// (its pre-stop wait is 5 s) well before the next pre-warm, 30 s on.
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "tick", "go", "hello-go", "Handle",
		"  scale: {initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}\n"+
			"  triggers:\n    - {name: every, cron: {schedule: \"@every 40s\", preWarm: 10s}}\n"))
	var fires []invocation.Record
	var zero []time.Time // when the function was seen without a pod
	eventually.TrueWithin(t, 2*within, "three cron fires", func() bool {
		if len(pods(t, ns, "tick")) == 0 {
			zero = append(zero, time.Now())
		}
		fires = records(t, ns, "tick", "trigger=cron")
		return len(fires) >= 3
	})
	for i, f := range fires {
		if f.Status != http.StatusOK {
			t.Errorf("fire at %s: %d %s", f.Start, f.Status, f.Error)
		}
		if i > 0 && f.Start.Sub(fires[i-1].Start) < 20*time.Second {
			t.Errorf("fires at %s and %s: one time fired twice", fires[i-1].Start, f.Start)
		}
	}
	// The first fire may come before its pre-warm could start anything;
	// each later one found the instance its pre-warm started, from zero.
	for i, f := range fires[1:] {
		if f.ColdStart {
			t.Errorf("the fire at %s waited for a cold start: pre-warm did not have an instance ready", f.Start)
		}
		if !slices.ContainsFunc(zero, func(z time.Time) bool { return z.After(fires[i].Start) && z.Before(f.Start) }) {
			t.Errorf("no moment at zero seen between the fires at %s and %s: the instance was warm without pre-warm", fires[i].Start, f.Start)
		}
	}
}
