package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
)

// TestOwnImage reads the controller's image from a Pod on a real API
// server, as the controller does from its own: the image of the container
// named controller, not of the others; a Pod that is missing or has no
// such container is an error that names it.
func TestOwnImage(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	e := &env{cfg: cfg, c: c}
	ns := e.namespace(t)
	ctx := context.Background()
	for name, containers := range map[string][]corev1.Container{
		"sless-controller-7d9f": {{Name: "proxy", Image: "registry.test/proxy:1"}, {Name: controller.ControllerContainer, Image: "registry.test/sless@sha256:0123"}},
		"other":                 {{Name: "app", Image: "registry.test/app:1"}},
	} {
		e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Containers: containers}})
	}

	image, err := controller.OwnImage(ctx, c, ns, "sless-controller-7d9f")
	if err != nil || image != "registry.test/sless@sha256:0123" {
		t.Errorf("OwnImage = %q, %v; want the controller container's image", image, err)
	}
	for _, tc := range []struct{ namespace, pod, want string }{
		{ns, "gone", "read pod " + ns + `/gone: pods "gone" not found`},
		{ns, "other", `pod ` + ns + `/other has no container "controller"`},
		{"", "sless-controller-7d9f", "namespace and name are needed"},
	} {
		image, err := controller.OwnImage(ctx, c, tc.namespace, tc.pod)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OwnImage(%q, %q) = %q, %v; want an error with %q", tc.namespace, tc.pod, image, err, tc.want)
		}
	}
}
