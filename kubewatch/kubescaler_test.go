package kubewatch_test

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/kubewatch"
)

// TestKubernetesScaler changes a Deployment's replicas through the scale
// subresource of a real API server, writes nothing when they match, and
// reports the pods the Deployment has by its status.
func TestKubernetesScaler(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	controlplane.CreateDeployment(t, c, "fn", 1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fn", Namespace: "default"}}
	var got appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
		t.Fatal(err)
	}
	got.Status.Replicas = 2 // the pods a deployment controller would have made
	if err := c.Status().Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	s := &kubewatch.KubernetesScaler{Client: c}
	had, err := s.Scale(ctx, "default", "fn", 5)
	if err != nil || had != 2 {
		t.Fatalf("Scale to 5 = %d, %v; want it to report the 2 pods of its status", had, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 5 {
		t.Errorf("spec.replicas = %d, want 5", *got.Spec.Replicas)
	}
	version := got.ResourceVersion
	if had, err := s.Scale(ctx, "default", "fn", 5); err != nil || had != 2 {
		t.Fatalf("Scale to 5 again = %d, %v", had, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != version {
		t.Errorf("scaling to the same replicas wrote the Deployment (version %s → %s)", version, got.ResourceVersion)
	}
	// A Function seen before its Deployment: a wait, not a failure.
	if _, err := s.Scale(ctx, "default", "absent", 1); !errors.Is(err, autoscaler.ErrNoWorkload) {
		t.Errorf("scaling a missing Deployment: %v, want ErrNoWorkload", err)
	}
	if _, err := s.Scale(ctx, "default", "fn", 0); err != nil {
		t.Fatalf("scale to zero: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil || *got.Spec.Replicas != 0 {
		t.Errorf("after scale to zero: %v replicas, %v", got.Spec.Replicas, err)
	}
}
