package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControllerContainer is the controller's container in its own Pod
// (config/controller/deployment.yaml), whose image OwnImage reads.
const ControllerContainer = "controller"

// OwnImage is the image of the controller's container in its Pod
// namespace/pod. The queue-proxy sidecars run it, so that they come from
// the registry and version the installer chose for the controller (a
// kustomize images override rewrites the controller's image, never a flag
// naming another one) and speak the contract this controller writes.
func OwnImage(ctx context.Context, c client.Reader, namespace, pod string) (string, error) {
	if namespace == "" || pod == "" {
		return "", errors.New("own image: both the pod's namespace and name are needed")
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, &p); err != nil {
		return "", fmt.Errorf("own image: read pod %s/%s: %w", namespace, pod, err)
	}
	for _, ct := range p.Spec.Containers {
		if ct.Name == ControllerContainer {
			return ct.Image, nil
		}
	}
	return "", fmt.Errorf("own image: pod %s/%s has no container %q", namespace, pod, ControllerContainer)
}
