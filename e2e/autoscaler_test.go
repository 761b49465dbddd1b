//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/autoscaler/shard"
)

// TestAutoscalerFailover: the two autoscaler replicas share the functions.
// The one scaling a function at zero is killed as a crash or the OOM
// killer would end it (SIGKILL: no release of its share), and the
// function's first request is answered all the same. The kubelet restarts
// the container under the same pod name, which takes its share back at
// once; a replica that does not come back (bench-scale kills one for good)
// leaves its share to its peer once its Lease lapsed.
func TestAutoscalerFailover(t *testing.T) {
	scaleAutoscaler(t, 2)
	ns := namespace(t, "e2e-failover")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "hello", "go", "hello-go", "Handle",
		"  scale: {initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}\n"))
	waitFor(t, "the function created at zero", func() bool {
		return function(t, ns, "hello").Status.ObservedGeneration > 0 && len(pods(t, ns, "hello")) == 0
	})
	var owner corev1.Pod
	waitFor(t, "an autoscaler replica to scale the function", func() bool {
		name := bucketHolder(t, ns, "hello")
		return name != "" && cluster.c.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: name}, &owner) == nil
	})
	killContainer(t, owner, "autoscaler")
	killed := time.Now()
	if a := mustInvokeKnown(t, ns, "hello", ""); a.code != http.StatusOK {
		t.Fatalf("the first request at zero, its autoscaler killed: %d %s", a.code, a.body)
	}
	t.Logf("answered %s after the autoscaler scaling the function was killed", time.Since(killed).Round(100*time.Millisecond))
	scaleAutoscaler(t, 2) // the killed one back, both ready
}

// bucketHolder is the pod holding the Lease of the function's bucket, ""
// for none.
func bucketHolder(t *testing.T, ns, name string) string {
	t.Helper()
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: "sless-system", Name: shard.BucketLease(shard.DefaultPrefix,
		shard.Bucket(ns, name, shard.DefaultBuckets), shard.DefaultBuckets)}
	if err := cluster.c.Get(context.Background(), key, &l); err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}
