package kubewatch

import (
	"cmp"
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/autoscaler"
)

// WriteTimeout bounds a KubernetesScaler's Scale by default.
const WriteTimeout = 5 * time.Second

// KubernetesScaler writes a function's replicas through its Deployment's
// scale subresource, the one writer of replicas for functions owned by
// sless (the controller sets them only at creation).
type KubernetesScaler struct {
	// Client writes the scale subresource.
	Client client.Client
	// Timeout bounds one Scale (WriteTimeout when 0): an API server that
	// stalls delays that function's write, never for long.
	Timeout time.Duration
	// Reader reads Deployments; with an informer cache behind it a
	// decision costs the API server nothing unless replicas change (a
	// tick decides for every function). Client when nil.
	Reader client.Reader
}

// Scale sets the replicas of the Deployment namespace/name, writing only
// when they differ, and returns the pods the Deployment had (its status),
// started or not.
func (s *KubernetesScaler) Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.Timeout, WriteTimeout))
	defer cancel()
	r := s.Reader
	if r == nil {
		r = s.Client
	}
	var dep appsv1.Deployment
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &dep)
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("deployment %s/%s: %w", namespace, name, autoscaler.ErrNoWorkload)
	}
	if err != nil {
		return 0, fmt.Errorf("get deployment %s/%s: %w", namespace, name, err)
	}
	had := dep.Status.Replicas
	if ptr.Deref(dep.Spec.Replicas, 1) == replicas {
		return had, nil
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	if err := s.Client.SubResource("scale").Patch(ctx, &dep, patch, client.WithSubResourceBody(&autoscalingv1.Scale{})); err != nil {
		return had, fmt.Errorf("scale %s/%s to %d: %w", namespace, name, replicas, err)
	}
	return had, nil
}
