package kubewatch

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
)

// KEDAReporter takes the decisions for the functions whose replicas KEDA
// writes, knows a function before its first decision (with the replicas it
// has), and forgets a function KEDA no longer scales, so that KEDA gets
// NotFound for it rather than a stale number: *kedascaler.Server.
type KEDAReporter interface {
	autoscaler.ReplicaWriter
	Know(namespace, name string, replicas int32)
	Forget(namespace, name string)
}

// ReplicaRouter is the autoscaler's ReplicaWriter on Kubernetes. Every
// function has one writer of replicas, so two never fight: the Deployment's
// scale subresource when sless owns it (scale.owner sless and no RabbitMQ
// trigger), KEDA through the external scaler when KEDA does (scale.owner
// keda, or any RabbitMQ trigger: KEDA also scales those on their queues).
// The AutoscalerFeed tells it each function's owner.
type ReplicaRouter struct {
	kube autoscaler.ReplicaWriter
	keda KEDAReporter

	// Owns, when set, fences the writes: a function this replica does not
	// scale now (autoscaler/shard) is not written, even by a decision
	// made before it moved, or while the replica could not renew its
	// share. Set before use.
	Owns func(namespace, name string) bool

	mu     sync.Mutex
	byKEDA map[types.NamespacedName]bool // every valid function, true when KEDA-owned
}

// NewReplicaRouter returns a router writing sless-owned functions' replicas
// with kube and reporting KEDA-owned ones' to keda.
func NewReplicaRouter(kube autoscaler.ReplicaWriter, keda KEDAReporter) *ReplicaRouter {
	return &ReplicaRouter{kube: kube, keda: keda, byKEDA: map[types.NamespacedName]bool{}}
}

// Scale sends the replicas to the function's owner and returns what the
// owner had. A function the AutoscalerFeed does not know (deleted, invalid) is
// written nowhere.
func (r *ReplicaRouter) Scale(ctx context.Context, namespace, name string, replicas int32) (int32, error) {
	if r.Owns != nil && !r.Owns(namespace, name) {
		return 0, fmt.Errorf("%s/%s: %w", namespace, name, autoscaler.ErrNotScaledHere)
	}
	r.mu.Lock()
	keda, known := r.byKEDA[types.NamespacedName{Namespace: namespace, Name: name}]
	if known && keda {
		// Under the lock, so that a Forget cannot come between the owner
		// check and the report and leave a deleted function reported.
		defer r.mu.Unlock()
		return r.keda.Scale(ctx, namespace, name, replicas)
	}
	r.mu.Unlock()
	if !known {
		return 0, fmt.Errorf("%s/%s: no owner of its replicas known (not a valid Function)", namespace, name)
	}
	return r.kube.Scale(ctx, namespace, name, replicas)
}

// setOwner records who writes a function's replicas. A function that
// turns KEDA-owned is known to KEDA's side at once, with replicas (what it
// has now), and one that stops being KEDA-owned is forgotten there.
func (r *ReplicaRouter) setOwner(key types.NamespacedName, keda bool, replicas int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch was := r.byKEDA[key]; {
	case keda && !was:
		r.keda.Know(key.Namespace, key.Name, replicas)
	case was && !keda:
		r.keda.Forget(key.Namespace, key.Name)
	}
	r.byKEDA[key] = keda
}

// remove drops a function that is deleted or no longer valid.
func (r *ReplicaRouter) remove(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKEDA[key] {
		r.keda.Forget(key.Namespace, key.Name)
	}
	delete(r.byKEDA, key)
}

// ownedByKEDA reports whether KEDA writes a defaulted function's replicas.
func ownedByKEDA(fn *v1alpha1.Function) bool {
	return fn.Spec.Scale.Owner == v1alpha1.OwnerKEDA ||
		slices.ContainsFunc(fn.Spec.Triggers, func(t v1alpha1.Trigger) bool { return t.RabbitMQ != nil })
}
