//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/invocation"
)

// scaleAutoscaler sets the autoscaler's replicas and waits until they all
// run, one of them leading (only the leader is ready).
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
	waitFor(t, "the autoscaler's replicas running, one leading", func() bool {
		var now appsv1.Deployment
		err := cluster.c.Get(ctx, client.ObjectKeyFromObject(&d), &now)
		return err == nil && now.Status.ObservedGeneration >= now.Generation && now.Status.Replicas == replicas &&
			now.Status.ReadyReplicas == 1
	})
}

// cronRecords reads the cron invocations of a function from every
// activator: each keeps the records of what passed through it.
func cronRecords(t *testing.T, ns, name string) []invocation.Record {
	t.Helper()
	var list corev1.PodList
	if err := cluster.c.List(context.Background(), &list, client.InNamespace("sless-system"),
		client.MatchingLabels{"app.kubernetes.io/name": "sless-activator"}); err != nil {
		t.Fatal(err)
	}
	token := adminToken(t)
	var all []invocation.Record
	for _, p := range list.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.Status.PodIP+":9090/v1/namespaces/"+ns+"/functions/"+name+"/invocations?trigger=cron&limit=100", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct{ Invocations []invocation.Record }
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("invocations from %s: %s %v", p.Name, resp.Status, err)
		}
		all = append(all, page.Invocations...)
	}
	slices.SortFunc(all, func(a, b invocation.Record) int { return a.Start.Compare(b.Start) })
	return all
}

// With two autoscaler replicas, a cron trigger fires once per time, and
// pre-warm has an instance ready for the fire: no fire waits for a start.
func TestCronOnceWarm(t *testing.T) {
	scaleAutoscaler(t, 2)
	t.Cleanup(func() { scaleAutoscaler(t, 1) })
	ns := namespace(t, "e2e-cron")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "tick", "go", "hello-go", "Handle",
		"  scale: {initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}\n"+
			"  triggers:\n    - {name: every, cron: {schedule: \"@every 20s\", preWarm: 10s}}\n"))
	var fires []invocation.Record
	waitFor(t, "three cron fires", func() bool {
		fires = cronRecords(t, ns, "tick")
		return len(fires) >= 3
	})
	for i, f := range fires {
		if f.Status != http.StatusOK {
			t.Errorf("fire at %s: %d %s", f.Start, f.Status, f.Error)
		}
		if i > 0 && f.Start.Sub(fires[i-1].Start) < 10*time.Second {
			t.Errorf("fires at %s and %s: one time fired twice", fires[i-1].Start, f.Start)
		}
	}
	// The first fire may come before its pre-warm could start anything.
	for _, f := range fires[1:] {
		if f.ColdStart {
			t.Errorf("the fire at %s waited for a cold start: pre-warm did not have an instance ready", f.Start)
		}
	}
}
