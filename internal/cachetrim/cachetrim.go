// Package cachetrim trims the objects sless's watch caches keep to what
// its components read: with 10,000 Functions each byte kept of an object
// is 10 KB in every component that caches it (issue 40). No component
// reads an object's managed fields (the API server's record of who set
// which field, often as large as the object) or kubectl's
// last-applied-configuration annotation (a second copy of what was
// applied). Writes are safe without them: the components patch what they
// change, and a status update changes nothing else.
package cachetrim

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// LastAppliedAnnotation is where kubectl apply keeps what it applied.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Transform drops an object's managed fields and last-applied annotation
// as the cache takes it in (a cache.TransformFunc); anything that is not
// an object is kept as it is.
func Transform(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil
	}
	// Nil, not empty: an empty list would be sent, and reset them.
	if obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	if a := obj.GetAnnotations(); a != nil {
		if _, ok := a[LastAppliedAnnotation]; ok {
			delete(a, LastAppliedAnnotation)
			if len(a) == 0 {
				obj.SetAnnotations(nil)
			}
		}
	}
	return in, nil
}

// ScaleOnly is Transform, and for a Deployment also drops its pod
// template, which is most of it: for a cache of Deployments read for
// their replicas (the autoscaler's), never written whole.
func ScaleOnly(in any) (any, error) {
	if dep, ok := in.(*appsv1.Deployment); ok {
		dep.Spec.Template = corev1.PodTemplateSpec{}
	}
	return Transform(in)
}
