package main

import (
	"context"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// TestAutoscalerWakesOnMessage: a KEDA-owned function at zero, its queue
// on the broker of its trigger's Secret, is pushed active to KEDA when its
// first message arrives, and the message stays in the queue for the
// instance.
func TestAutoscalerWakesOnMessage(t *testing.T) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "wake")
	cfg := controlplane.Start(t)
	kubeconfig := writeKubeconfig(t, cfg)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	labels := map[string]string{wire.FunctionLabel: "orders"}
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "amqp", Namespace: "default"}, StringData: map[string]string{"url": amqptest.URL()}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "default", Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fn", Image: "x"}}}}}},
		&v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "default"},
			Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x", Scale: v1alpha1.Scale{Initial: ptr.To(int32(0))},
				Triggers: []v1alpha1.Trigger{{Name: "orders", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: queue, ConnectionSecret: "amqp"}}}}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	a := startAutoscalerWith(t, kubeconfig, nil)
	eventually.TrueWithin(t, 30*time.Second, "the autoscaler to lead", a.ready)
	ref := &externalscaler.ScaledObjectRef{Name: "orders", Namespace: "default", ScalerMetadata: map[string]string{wire.KEDAFunction: "orders"}}
	eventually.TrueWithin(t, 10*time.Second, "the function known, inactive", func() bool {
		r, err := a.keda.IsActive(ctx, ref)
		return err == nil && !r.Result
	})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := a.keda.StreamIsActive(sctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil { // the server has subscribed it
		t.Fatal(err)
	}
	amqptest.Publish(t, ch, queue, []byte(`{"order":1}`))
	push, err := stream.Recv()
	if err != nil || !push.Result {
		t.Fatalf("push after the first message: %v, %v; want active", push, err)
	}
	// The waker gives the message back to the broker as it wakes the
	// function, so it may still be on its way back when the push arrives.
	eventually.True(t, "the message back in the queue after the wake-up", func() bool { return amqptest.Depth(t, ch, queue) == 1 })
}
