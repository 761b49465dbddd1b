package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
)

// service is the desired Service of a Function: its EndpointSlices list the
// ready instances, serving port first (named "http") and admin port
// ("admin", the autoscaler's /stats), and it gives the function a stable
// in-cluster DNS name. It is headless: the activator and the autoscaler
// read the EndpointSlices and balance themselves, so a cluster IP would
// only take an address of the service range (exhausted by a few thousand
// functions) and kube-proxy rules per function.
func service(fn *v1alpha1.Function) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(fn, fn.Name),
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Selector:  functionLabels(fn),
			Ports: []corev1.ServicePort{
				{Name: wire.ServingPortName, Port: wire.ServingPort, TargetPort: intstr.FromInt32(wire.ServingPort)},
				{Name: wire.AdminPortName, Port: wire.AdminPort, TargetPort: intstr.FromInt32(wire.AdminPort)},
			},
		},
	}
}

// servicePart owns the selector and ports; the type and cluster IP are set
// at creation (a cluster IP cannot change), the rest is the API server's.
var servicePart = part[*corev1.Service]{
	owned: func(s *corev1.Service) any { return &s.Spec },
	set: func(dst, src *corev1.Service) {
		dst.Spec.Selector = src.Spec.Selector
		dst.Spec.Ports = src.Spec.Ports
	},
}
