package cachetrim

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTransform(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"last-applied and another", map[string]string{LastAppliedAnnotation: "{}", "team": "a"}, map[string]string{"team": "a"}},
		{"last-applied alone", map[string]string{LastAppliedAnnotation: "{}"}, nil},
		{"none", nil, nil},
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fn", Annotations: tc.in,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
		out, err := Transform(svc)
		if err != nil || out != svc {
			t.Fatalf("%s: %v %v, want the object itself", tc.name, out, err)
		}
		if svc.ManagedFields != nil || len(svc.Annotations) != len(tc.want) || svc.Annotations["team"] != tc.want["team"] {
			t.Errorf("%s: managed fields %v, annotations %v; want none and %v", tc.name, svc.ManagedFields, svc.Annotations, tc.want)
		}
	}
	if out, err := Transform("not an object"); out != "not an object" || err != nil {
		t.Errorf("not an object: %v %v, want it as it is", out, err)
	}
}

// A Deployment read for its replicas keeps them and its status, not its
// pod template.
func TestScaleOnly(t *testing.T) {
	replicas := int32(3)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fn", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "sless"}}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "function", Image: "fn:1"}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2}}
	if _, err := ScaleOnly(dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 || dep.Status.Replicas != 2 || len(dep.Spec.Template.Spec.Containers) != 0 || dep.ManagedFields != nil {
		t.Errorf("trimmed: %+v", dep)
	}
}
