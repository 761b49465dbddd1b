package autoscaler

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubernetesScaler writes a function's replicas through its Deployment's
// scale subresource, the one writer of replicas for functions owned by
// sless (the controller sets them only at creation).
type KubernetesScaler struct {
	Client client.Client
}

// Scale sets the replicas of the Deployment namespace/name, writing only
// when they differ, and returns the replicas the Deployment had.
func (s *KubernetesScaler) Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	var scale autoscalingv1.Scale
	if err := s.Client.SubResource("scale").Get(ctx, dep, &scale); err != nil {
		return 0, fmt.Errorf("get scale of %s/%s: %w", namespace, name, err)
	}
	had := scale.Spec.Replicas
	if had == replicas {
		return had, nil
	}
	scale.Spec.Replicas = replicas
	if err := s.Client.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(&scale)); err != nil {
		return had, fmt.Errorf("scale %s/%s to %d: %w", namespace, name, replicas, err)
	}
	return had, nil
}
