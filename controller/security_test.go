package controller_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// restrictedFailures checks a pod template with Pod Security admission's
// own checks, at level restricted of the latest policy version, as a
// namespace labelled pod-security.kubernetes.io/enforce=restricted would,
// and returns what fails: reason, then detail.
func restrictedFailures(t *testing.T, tmpl *corev1.PodTemplateSpec) []string {
	t.Helper()
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	level := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	for _, r := range evaluator.EvaluatePod(level, &tmpl.ObjectMeta, &tmpl.Spec) {
		if !r.Allowed {
			failed = append(failed, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return failed
}

// testRestricted: a Function's pods pass Pod Security "restricted" as the
// API server stored their template, unless its securityContext asks for
// root, which the same checks then report.
func testRestricted(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "plain"))
	d := waitObject(t, e, ns, "plain", &appsv1.Deployment{})
	if failed := restrictedFailures(t, &d.Spec.Template); len(failed) != 0 {
		t.Errorf("a default Function's pod fails Pod Security restricted: %q", failed)
	}
	if sp := d.Spec.Template.Spec.SecurityContext; sp == nil || sp.SeccompProfile == nil || sp.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v, want seccompProfile RuntimeDefault", sp)
	}
	qp := container(t, d, controller.QueueProxyContainer).SecurityContext
	if qp == nil || !ptr.Deref(qp.RunAsNonRoot, false) || ptr.Deref(qp.RunAsUser, 0) != wire.NonRootUID ||
		ptr.Deref(qp.RunAsGroup, 0) != wire.NonRootUID || ptr.Deref(qp.AllowPrivilegeEscalation, true) ||
		!ptr.Deref(qp.ReadOnlyRootFilesystem, false) || qp.Capabilities == nil || !equality.Semantic.DeepEqual(qp.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("queue-proxy securityContext = %+v, want non-root %d:%d, no escalation, read-only root, drop ALL", qp, wire.NonRootUID, wire.NonRootUID)
	}
	if fc := container(t, d, controller.FunctionContainer).SecurityContext; !equality.Semantic.DeepEqual(fc, v1alpha1.DefaultSecurityContext()) {
		t.Errorf("function securityContext = %+v, want the defaults %+v", fc, v1alpha1.DefaultSecurityContext())
	}

	e.create(t, newFunction(ns, "root", func(fn *v1alpha1.Function) {
		fn.Spec.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0)}
	}))
	d = waitObject(t, e, ns, "root", &appsv1.Deployment{})
	failed := strings.Join(restrictedFailures(t, &d.Spec.Template), "; ")
	for _, want := range []string{`runAsNonRoot != true: container "function"`, `runAsUser=0: container "function"`} {
		if !strings.Contains(failed, want) {
			t.Errorf("restricted failures of a Function run as root: %q, want %q among them", failed, want)
		}
	}
	if strings.Contains(failed, controller.QueueProxyContainer) {
		t.Errorf("the queue-proxy fails restricted beside a root function: %q", failed)
	}
}

// testSecurityContextOverrides: each field of spec.securityContext
// replaces its default and the rest stay; a change reaches the pod
// template, and taking the field out again restores the defaults.
func testSecurityContextOverrides(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "port80", func(fn *v1alpha1.Function) {
		fn.Spec.SecurityContext = &corev1.SecurityContext{
			RunAsUser:              ptr.To[int64](1000),
			ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:           &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}},
		}
	}))
	d := waitObject(t, e, ns, "port80", &appsv1.Deployment{})
	want := &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), ReadOnlyRootFilesystem: ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if got := container(t, d, controller.FunctionContainer).SecurityContext; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("function securityContext = %+v\nwant %+v", got, want)
	}
	// NET_BIND_SERVICE is the one capability restricted allows to add.
	if failed := restrictedFailures(t, &d.Spec.Template); len(failed) != 0 {
		t.Errorf("fails Pod Security restricted: %q", failed)
	}

	e.updateFunction(t, ns, "port80", func(fn *v1alpha1.Function) { fn.Spec.SecurityContext = nil })
	eventually.True(t, "the defaults back in the pod template", func() bool {
		e.get(t, ns, "port80", d)
		return equality.Semantic.DeepEqual(container(t, d, controller.FunctionContainer).SecurityContext, v1alpha1.DefaultSecurityContext())
	})
}

// testStatusAtZero: a Function at zero has replicas, readyReplicas and
// desiredReplicas in its stored status, as 0, for kubectl get's columns.
func testStatusAtZero(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "idle", func(fn *v1alpha1.Function) { fn.Spec.Scale.Initial = ptr.To[int32](0) }))
	e.waitCondition(t, ns, "idle", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonAutoscaler)
	var fn unstructured.Unstructured
	fn.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Function"))
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "idle"}, &fn); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replicas", "readyReplicas", "desiredReplicas"} {
		if v, found, err := unstructured.NestedInt64(fn.Object, "status", f); !found || err != nil || v != 0 {
			t.Errorf("status.%s = %v (present %v, %v), want 0 present", f, v, found, err)
		}
	}
}

// testRefusedByAPIServer: a Function whose Deployment the API server
// refuses, for what the shared validation does not check, gets Ready=False
// with the API server's reason rather than retries without a word.
func testRefusedByAPIServer(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "limited", func(fn *v1alpha1.Function) {
		fn.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}
	}))
	fn := e.waitCondition(t, ns, "limited", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if msg := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "Deployment") || !strings.Contains(msg, "resources.requests") {
		t.Errorf("Ready message %q, want the API server's refusal of the Deployment, naming the field", msg)
	}
	e.waitEvent(t, ns, "limited", v1alpha1.ReasonInvalidSpec, "resources.requests")
	if e.get(t, ns, "limited", &appsv1.Deployment{}) {
		t.Error("a Deployment exists")
	}

	e.updateFunction(t, ns, "limited", func(fn *v1alpha1.Function) { fn.Spec.Resources.Limits = nil })
	waitObject(t, e, ns, "limited", &appsv1.Deployment{})
	e.waitCondition(t, ns, "limited", v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
}
