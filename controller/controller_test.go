package controller_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// TestReconcile runs the controller against a real API server and checks
// what it makes of Functions as they are created, changed and deleted.
// There is no kubelet, Deployment controller, KEDA or garbage collector:
// where the controller reads their work, the test writes it.
func TestReconcile(t *testing.T) {
	e := newEnv(t)
	run := e.start(t, testOptions, true, nil)

	t.Run("create", func(t *testing.T) { testCreate(t, e) })
	t.Run("own server", func(t *testing.T) { testOwnServer(t, e) })
	t.Run("update keeps replicas", func(t *testing.T) { testUpdateKeepsReplicas(t, e) })
	t.Run("edits reverted", func(t *testing.T) { testEditsReverted(t, e) })
	t.Run("owner switch", func(t *testing.T) { testOwnerSwitch(t, e) })
	t.Run("rabbitmq", func(t *testing.T) { testRabbitMQ(t, e) })
	t.Run("triggers ready", func(t *testing.T) { testTriggersReady(t, e) })
	t.Run("invalid", func(t *testing.T) { testInvalid(t, e) })
	t.Run("invalid after valid", func(t *testing.T) { testInvalidAfterValid(t, e) })
	t.Run("name taken", func(t *testing.T) { testNameTaken(t, e) })
	t.Run("restricted", func(t *testing.T) { testRestricted(t, e) })
	t.Run("security context overrides", func(t *testing.T) { testSecurityContextOverrides(t, e) })
	t.Run("status at zero", func(t *testing.T) { testStatusAtZero(t, e) })
	t.Run("refused by the API server", func(t *testing.T) { testRefusedByAPIServer(t, e) })
	t.Run("instances failing", func(t *testing.T) { testInstancesFailing(t, e) })
	t.Run("delete", func(t *testing.T) { testDelete(t, e, run) })
}

// A Function without a runtime runs its own server: its image with its
// command, told its port but no handler; the queue-proxy speaks the
// server's protocol to it.
func testOwnServer(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "server", func(fn *v1alpha1.Function) {
		fn.Spec.Runtime = ""
		fn.Spec.Command = []string{"node", "server.js"}
		fn.Spec.Protocol = v1alpha1.ProtocolH2C
	}))
	d := waitObject(t, e, ns, "server", &appsv1.Deployment{})
	fc := container(t, d, controller.FunctionContainer)
	if fc.Image != "registry.test/hello:1" || !slices.Equal(fc.Command, []string{"node", "server.js"}) || len(fc.Args) != 0 {
		t.Errorf("function container runs %q %q %q, want the image with the Function's command", fc.Image, fc.Command, fc.Args)
	}
	if got, want := envMap(fc), map[string]string{"PORT": "8080"}; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("function env = %v, want %v", got, want)
	}
	if p := envMap(container(t, d, controller.QueueProxyContainer))[wire.EnvUserProtocol]; p != "h2c" {
		t.Errorf("queue-proxy's %s = %q, want h2c", wire.EnvUserProtocol, p)
	}
}

func testCreate(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "hello", func(fn *v1alpha1.Function) {
		fn.Spec.Runtime = v1alpha1.RuntimePython
		fn.Spec.Env = []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}
		fn.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		fn.Spec.Concurrency = 5
		fn.Spec.TimeoutSeconds = 60
		fn.Spec.Scale = v1alpha1.Scale{Max: 5, Initial: ptr.To[int32](2)}
	}))
	d := waitObject(t, e, ns, "hello", &appsv1.Deployment{})
	var fn v1alpha1.Function
	e.get(t, ns, "hello", &fn)
	controlledBy(t, d, &fn)

	labels := map[string]string{wire.FunctionLabel: "hello", wire.NamespaceLabel: ns}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want scale.initial 2", *d.Spec.Replicas)
	}
	if !equality.Semantic.DeepEqual(d.Spec.Selector.MatchLabels, labels) || !equality.Semantic.DeepEqual(d.Spec.Template.Labels, labels) {
		t.Errorf("selector %v, pod labels %v; want %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels, labels)
	}
	for k, v := range labels {
		if d.Labels[k] != v {
			t.Errorf("deployment label %s = %q, want %q", k, d.Labels[k], v)
		}
	}
	for k, v := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9091", "prometheus.io/path": "/metrics"} {
		if got := d.Spec.Template.Annotations[k]; got != v {
			t.Errorf("pod annotation %s = %q, want %q", k, got, v)
		}
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 2 {
		t.Fatalf("containers: %d, want function and queue-proxy", len(pod.Containers))
	}
	if g := ptr.Deref(pod.TerminationGracePeriodSeconds, 0); g <= 60 {
		t.Errorf("terminationGracePeriodSeconds = %d, want more than the 60 s drain", g)
	}
	if ptr.Deref(pod.EnableServiceLinks, true) {
		t.Error("service links are enabled")
	}

	fc := container(t, d, controller.FunctionContainer)
	if fc.Image != "registry.test/hello:1" {
		t.Errorf("function image = %q", fc.Image)
	}
	wantEnv := map[string]string{"PORT": "8080", "SLESS_HANDLER": "main.handle", "GREETING": "hi"}
	if got := envMap(fc); !equality.Semantic.DeepEqual(got, wantEnv) {
		t.Errorf("function env = %v, want %v", got, wantEnv)
	}
	if q := fc.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("function cpu request = %v, want 100m", q.String())
	}
	if h := fc.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.HTTPGet == nil || h.PreStop.HTTPGet.Path != "/wait-for-drain" ||
		h.PreStop.HTTPGet.Port != intstr.FromInt32(9091) {
		t.Errorf("function container's lifecycle %+v, want a preStop GET of the queue-proxy's /wait-for-drain", fc.Lifecycle)
	}

	qp := container(t, d, controller.QueueProxyContainer)
	if qp.Image != testOptions.Image || !equality.Semantic.DeepEqual(qp.Args, []string{"queue-proxy"}) {
		t.Errorf("queue-proxy image %q args %v", qp.Image, qp.Args)
	}
	wantQP := map[string]string{
		"SLESS_NAMESPACE": ns, "SLESS_FUNCTION": "hello", "SLESS_USER_PORT": "8080",
		"SLESS_SERVING_PORT": "8012", "SLESS_ADMIN_PORT": "9091", "SLESS_CONCURRENCY": "5",
		"SLESS_TIMEOUT_SECONDS": "60", "SLESS_DRAIN_SECONDS": "60", "SLESS_USER_PROTOCOL": "http1", // the CRD's default
		"SLESS_IDLE_TIMEOUT_SECONDS": "0", "SLESS_MAX_DURATION_SECONDS": "60", // the timeout, maxDurationSeconds unset
	}
	if got := envMap(qp); !equality.Semantic.DeepEqual(got, wantQP) {
		t.Errorf("queue-proxy env = %v, want %v", got, wantQP)
	}
	if p := qp.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port != intstr.FromInt32(9091) {
		t.Errorf("queue-proxy readiness probe = %+v, want GET /readyz on 9091", p)
	}
	if _, limited := qp.Resources.Limits[corev1.ResourceCPU]; limited {
		t.Error("queue-proxy has a CPU limit")
	}
	if qp.Resources.Requests.Cpu().IsZero() || qp.Resources.Limits.Memory().IsZero() {
		t.Errorf("queue-proxy resources = %+v, want a CPU request and a memory limit", qp.Resources)
	}

	svc := waitObject(t, e, ns, "hello", &corev1.Service{})
	controlledBy(t, svc, &fn)
	if !equality.Semantic.DeepEqual(svc.Spec.Selector, labels) || svc.Labels[wire.FunctionLabel] != "hello" {
		t.Errorf("service selector %v labels %v", svc.Spec.Selector, svc.Labels)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service cluster IP = %q, want a headless service", svc.Spec.ClusterIP)
	}
	wantPorts := []struct {
		name string
		port int32
	}{{"http", 8012}, {"admin", 9091}}
	if len(svc.Spec.Ports) != len(wantPorts) {
		t.Fatalf("service ports = %+v", svc.Spec.Ports)
	}
	for i, w := range wantPorts {
		p := svc.Spec.Ports[i]
		if p.Name != w.name || p.Port != w.port || p.TargetPort != intstr.FromInt32(w.port) {
			t.Errorf("service port %d = %+v, want %s %d → %d", i, p, w.name, w.port, w.port)
		}
	}
	if e.get(t, ns, "hello", &kedav1alpha1.ScaledObject{}) {
		t.Error("a ScaledObject exists for a function the autoscaler scales")
	}

	got := e.waitCondition(t, ns, "hello", v1alpha1.ConditionDeploymentReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
	if got.Status.URL != "http://activator.test/fn/"+ns+"/hello" || got.Status.DesiredReplicas != 2 {
		t.Errorf("status url %q desired %d", got.Status.URL, got.Status.DesiredReplicas)
	}
	for _, c := range []struct {
		typ    string
		status metav1.ConditionStatus
		reason string
	}{
		{v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonAutoscaler},
		{v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending},
	} {
		if got := meta.FindStatusCondition(got.Status.Conditions, c.typ); got == nil || got.Status != c.status || got.Reason != c.reason {
			t.Errorf("condition %s = %+v, want %s %s", c.typ, got, c.status, c.reason)
		}
	}

	e.markAvailable(t, ns, "hello")
	ready := e.waitCondition(t, ns, "hello", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if ready.Status.Replicas != 2 || ready.Status.ReadyReplicas != 2 {
		t.Errorf("replicas %d ready %d, want 2 and 2", ready.Status.Replicas, ready.Status.ReadyReplicas)
	}
	e.waitEvent(t, ns, "hello", "Created", "Deployment hello")
}

func testUpdateKeepsReplicas(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "busy", func(fn *v1alpha1.Function) {
		fn.Spec.Env = []corev1.EnvVar{{Name: "OLD", Value: "1"}}
		fn.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
	}))
	waitObject(t, e, ns, "busy", &appsv1.Deployment{})

	// The autoscaler writes replicas through the scale subresource.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "busy"}}
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 7}}
	if err := e.c.SubResource("scale").Update(context.Background(), d, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	e.updateFunction(t, ns, "busy", func(fn *v1alpha1.Function) {
		fn.Spec.Env = []corev1.EnvVar{{Name: "NEW", Value: "2"}}
		fn.Spec.Resources = corev1.ResourceRequirements{}
		fn.Spec.Scale.Initial = ptr.To[int32](3)
		fn.Spec.Image = "registry.test/hello:2"
	})
	var got appsv1.Deployment
	eventually.True(t, "the new image in the pod template", func() bool {
		e.get(t, ns, "busy", &got)
		return container(t, &got, controller.FunctionContainer).Image == "registry.test/hello:2"
	})
	fc := container(t, &got, controller.FunctionContainer)
	if env := envMap(fc); env["NEW"] != "2" || env["OLD"] != "" {
		t.Errorf("function env = %v, want NEW and no OLD", env)
	}
	if len(fc.Resources.Limits) != 0 {
		t.Errorf("function limits = %v, want the removed limit gone", fc.Resources.Limits)
	}
	if *got.Spec.Replicas != 7 {
		t.Errorf("replicas = %d, want the autoscaler's 7 kept", *got.Spec.Replicas)
	}
	eventually.True(t, "desiredReplicas 7 in the status", func() bool {
		var fn v1alpha1.Function
		e.get(t, ns, "busy", &fn)
		return fn.Status.DesiredReplicas == 7
	})
}

func testEditsReverted(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "guarded"))
	d := waitObject(t, e, ns, "guarded", &appsv1.Deployment{})
	edited := d.DeepCopy()
	for i := range edited.Spec.Template.Spec.Containers {
		c := &edited.Spec.Template.Spec.Containers[i]
		switch c.Name {
		case controller.QueueProxyContainer:
			c.Image = "registry.test/other:1"
		case controller.FunctionContainer:
			c.SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
		}
	}
	if err := e.c.Patch(context.Background(), edited, client.MergeFrom(d)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the queue-proxy image and the function's security context restored", func() bool {
		var got appsv1.Deployment
		e.get(t, ns, "guarded", &got)
		return container(t, &got, controller.QueueProxyContainer).Image == testOptions.Image &&
			!ptr.Deref(container(t, &got, controller.FunctionContainer).SecurityContext.AllowPrivilegeEscalation, true)
	})
}

func testOwnerSwitch(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "switch", func(fn *v1alpha1.Function) {
		fn.Spec.Scale = v1alpha1.Scale{Min: 1, Max: 4, Window: &metav1.Duration{Duration: 20 * time.Second},
			ScaleToZeroGracePeriod: &metav1.Duration{Duration: 5500 * time.Millisecond}}
	}))
	e.waitCondition(t, ns, "switch", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonAutoscaler)
	if e.get(t, ns, "switch", &kedav1alpha1.ScaledObject{}) {
		t.Fatal("a ScaledObject exists for owner sless")
	}

	e.updateFunction(t, ns, "switch", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA })
	so := waitObject(t, e, ns, "switch", &kedav1alpha1.ScaledObject{})
	var fn v1alpha1.Function
	e.get(t, ns, "switch", &fn)
	controlledBy(t, so, &fn)
	s := so.Spec
	if s.ScaleTargetRef == nil || s.ScaleTargetRef.Name != "switch" || s.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("scaleTargetRef = %+v", s.ScaleTargetRef)
	}
	if ptr.Deref(s.MinReplicaCount, -1) != 1 || ptr.Deref(s.MaxReplicaCount, -1) != 4 || ptr.Deref(s.CooldownPeriod, -1) != 26 ||
		ptr.Deref(s.PollingInterval, -1) != 2 {
		t.Errorf("min %v max %v cooldown %v polling %v, want 1, 4, 26 (20 s + 5.5 s rounded up) and 2 (the 2 s panic window)",
			s.MinReplicaCount, s.MaxReplicaCount, s.CooldownPeriod, s.PollingInterval)
	}
	// KEDA's HPA applies the autoscaler's number as is, as read back
	// from the API server.
	asIs := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0)),
		SelectPolicy: ptr.To(autoscalingv2.MaxChangePolicySelect), Tolerance: ptr.To(resource.MustParse("0")),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 1}}}
	if s.Advanced == nil || s.Advanced.HorizontalPodAutoscalerConfig == nil ||
		!equality.Semantic.DeepEqual(s.Advanced.HorizontalPodAutoscalerConfig.Behavior,
			&autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: asIs, ScaleDown: asIs}) {
		t.Errorf("advanced = %+v, want the HPA behaviour that applies the number as is", s.Advanced)
	}
	want := []kedav1alpha1.ScaleTriggers{{Type: "external-push", Name: "sless-autoscaler", Metadata: map[string]string{
		"scalerAddress": testOptions.AutoscalerAddress, "function": "switch", "namespace": ns,
	}}}
	if !equality.Semantic.DeepEqual(s.Triggers, want) {
		t.Errorf("triggers = %+v, want %+v", s.Triggers, want)
	}
	e.waitCondition(t, ns, "switch", v1alpha1.ConditionScalingReady, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForKEDA)
	e.markKEDAReady(t, ns, "switch")
	e.waitCondition(t, ns, "switch", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonScaledObjectReady)

	e.updateFunction(t, ns, "switch", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerSless })
	eventually.True(t, "the ScaledObject deleted", func() bool { return !e.get(t, ns, "switch", &kedav1alpha1.ScaledObject{}) })
	e.waitCondition(t, ns, "switch", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonAutoscaler)
	e.waitEvent(t, ns, "switch", "Deleted", "ScaledObject switch")
}

func testRabbitMQ(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "orders", func(fn *v1alpha1.Function) {
		fn.Spec.Triggers = []v1alpha1.Trigger{
			{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}},
			{Name: "new", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "orders.new", ConnectionSecret: "amqp", TargetQueueLength: 7, ActivationQueueLength: 2}},
			{Name: "audit", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "audit", ConnectionSecret: "amqp-audit"}},
		}
	}))
	so := waitObject(t, e, ns, "orders", &kedav1alpha1.ScaledObject{})
	wantTriggers := []kedav1alpha1.ScaleTriggers{
		{Type: "external-push", Name: "sless-autoscaler", Metadata: map[string]string{
			"scalerAddress": testOptions.AutoscalerAddress, "function": "orders", "namespace": ns}},
		{Type: "rabbitmq", Name: "rabbitmq-new", Metadata: map[string]string{
			"protocol": "amqp", "queueName": "orders.new", "mode": "QueueLength", "value": "7", "activationValue": "2"},
			AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: "orders.new"}},
		{Type: "rabbitmq", Name: "rabbitmq-audit", Metadata: map[string]string{
			"protocol": "amqp", "queueName": "audit", "mode": "QueueLength", "value": "5", "activationValue": "0"},
			AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: "orders.audit"}},
	}
	if !equality.Semantic.DeepEqual(so.Spec.Triggers, wantTriggers) {
		t.Errorf("triggers = %+v\nwant %+v", so.Spec.Triggers, wantTriggers)
	}
	for _, a := range []struct{ name, secret string }{{"orders.new", "amqp"}, {"orders.audit", "amqp-audit"}} {
		ta := waitObject(t, e, ns, a.name, &kedav1alpha1.TriggerAuthentication{})
		want := []kedav1alpha1.AuthSecretTargetRef{{Parameter: "host", Name: a.secret, Key: "url"}}
		if !equality.Semantic.DeepEqual(ta.Spec.SecretTargetRef, want) || ta.Labels[wire.FunctionLabel] != "orders" {
			t.Errorf("TriggerAuthentication %s: %+v labels %v", a.name, ta.Spec.SecretTargetRef, ta.Labels)
		}
	}

	checkConsumerEnv(t, waitObject(t, e, ns, "orders", &appsv1.Deployment{}))

	e.updateFunction(t, ns, "orders", func(fn *v1alpha1.Function) { fn.Spec.Triggers = fn.Spec.Triggers[:2] })
	eventually.True(t, "the audit TriggerAuthentication deleted", func() bool {
		return !e.get(t, ns, "orders.audit", &kedav1alpha1.TriggerAuthentication{})
	})
	eventually.True(t, "the audit trigger gone", func() bool {
		e.get(t, ns, "orders", so)
		return len(so.Spec.Triggers) == 2
	})

	e.updateFunction(t, ns, "orders", func(fn *v1alpha1.Function) { fn.Spec.Triggers = fn.Spec.Triggers[:1] })
	eventually.True(t, "the ScaledObject and TriggerAuthentications deleted", func() bool {
		return !e.get(t, ns, "orders", &kedav1alpha1.ScaledObject{}) && !e.get(t, ns, "orders.new", &kedav1alpha1.TriggerAuthentication{})
	})
}

// testTriggersReady: TriggersReady says, naming each trigger, what keeps a
// RabbitMQ trigger from being consumed: a missing Secret, a Secret without
// url, refused credentials, a missing queue; checked on the real broker.
func testTriggersReady(t *testing.T, e *env) {
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "controller")
	ns := e.namespace(t)
	for name, data := range map[string]map[string]string{
		"good":  {"url": amqptest.URL()},
		"wrong": {"url": strings.Replace(amqptest.URL(), "guest:guest", "guest:wrong", 1)},
		"nourl": {"host": "x"},
	} {
		e.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data})
	}
	rabbit := func(name, queue, secret string) v1alpha1.Trigger {
		return v1alpha1.Trigger{Name: name, RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: queue, ConnectionSecret: secret}}
	}
	e.create(t, newFunction(ns, "fine", func(fn *v1alpha1.Function) {
		fn.Spec.Triggers = []v1alpha1.Trigger{rabbit("orders", queue, "good")}
	}))
	fine := e.waitCondition(t, ns, "fine", v1alpha1.ConditionTriggersReady, metav1.ConditionTrue, v1alpha1.ReasonTriggersReachable)
	if want := []v1alpha1.TriggerStatus{{Name: "orders", Ready: true}}; !slices.Equal(fine.Status.Triggers, want) {
		t.Errorf("status.triggers %+v, want %+v", fine.Status.Triggers, want)
	}

	e.create(t, newFunction(ns, "broken", func(fn *v1alpha1.Function) {
		fn.Spec.Triggers = []v1alpha1.Trigger{{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}},
			rabbit("a", queue, "absent"), rabbit("b", queue+"-2", "nourl"), rabbit("c", queue+"-3", "wrong"), rabbit("d", "sless-test-no-such-queue", "good")}
	}))
	fn := e.waitCondition(t, ns, "broken", v1alpha1.ConditionTriggersReady, metav1.ConditionFalse, v1alpha1.ReasonTriggerFailing)
	msg := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionTriggersReady).Message
	for _, want := range []string{"trigger a: the Secret absent not found", "trigger b: the Secret nourl has no key url",
		"trigger c: broker amqp://guest:xxxxx@127.0.0.1:5672/ refused the credentials", `trigger d: queue "sless-test-no-such-queue" not found`} {
		if !strings.Contains(msg, want) {
			t.Errorf("TriggersReady message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "wrong") {
		t.Errorf("TriggersReady message %q quotes a password", msg)
	}
	// The same, by trigger, for programs: the HTTP trigger is not checked.
	got := map[string]v1alpha1.TriggerStatus{}
	for _, ts := range fn.Status.Triggers {
		got[ts.Name] = ts
	}
	if len(got) != 4 || got["a"].Ready || got["a"].Message != "the Secret absent not found" ||
		got["d"].Ready || !strings.Contains(got["d"].Message, "not found") {
		t.Errorf("status.triggers %+v: want a, b, c and d failing, each with its cause", fn.Status.Triggers)
	}
}

// checkConsumerEnv: the queue-proxy of the orders Deployment consumes both
// queues, each URL from its trigger's Secret and none in a literal.
func checkConsumerEnv(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	var qp *corev1.Container
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == controller.QueueProxyContainer {
			qp = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if qp == nil {
		t.Fatal("no queue-proxy container")
	}
	env := map[string]corev1.EnvVar{}
	for _, v := range qp.Env {
		env[v.Name] = v
		if strings.Contains(v.Value, "amqp://") {
			t.Errorf("env %s holds a URL literal", v.Name)
		}
	}
	var triggers []wire.RabbitMQTrigger
	if err := json.Unmarshal([]byte(env[wire.EnvRabbitMQ].Value), &triggers); err != nil {
		t.Fatalf("%s = %q: %v", wire.EnvRabbitMQ, env[wire.EnvRabbitMQ].Value, err)
	}
	want := []wire.RabbitMQTrigger{
		{Name: "new", Queue: "orders.new", URLEnv: "SLESS_AMQP_URL_NEW", Prefetch: 10, MaxRetries: 3},
		{Name: "audit", Queue: "audit", URLEnv: "SLESS_AMQP_URL_AUDIT", Prefetch: 10, MaxRetries: 3},
	}
	if !equality.Semantic.DeepEqual(triggers, want) {
		t.Errorf("triggers %+v\nwant %+v", triggers, want)
	}
	if got := env[wire.EnvRecordsURL].Value; got != "http://activator.test:9090" {
		t.Errorf("%s = %q, want the activators' admin API", wire.EnvRecordsURL, got)
	}
	if ref := env[wire.EnvPodIP].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("%s = %+v, want the pod's IP", wire.EnvPodIP, env[wire.EnvPodIP])
	}
	for urlEnv, secret := range map[string]string{"SLESS_AMQP_URL_NEW": "amqp", "SLESS_AMQP_URL_AUDIT": "amqp-audit"} {
		ref := env[urlEnv].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != secret || ref.SecretKeyRef.Key != "url" {
			t.Errorf("%s = %+v, want from the url key of Secret %s", urlEnv, env[urlEnv], secret)
		}
	}
}

func testInvalid(t *testing.T, e *env) {
	ns := e.namespace(t)
	for _, tc := range []struct {
		name, field string
		change      func(*v1alpha1.Function)
	}{
		{"no-image", "spec.image", func(fn *v1alpha1.Function) { fn.Spec.Image = "" }},
		{"reserved-env", "spec.env[0].name", func(fn *v1alpha1.Function) {
			fn.Spec.Env = []corev1.EnvVar{{Name: "PORT", Value: "1"}}
		}},
		{"bad-cron", "spec.triggers[0].cron.schedule", func(fn *v1alpha1.Function) {
			fn.Spec.Triggers = []v1alpha1.Trigger{{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "every tuesday"}}}
		}},
		{"no-secret", "spec.triggers[0].rabbitmq.connectionSecret", func(fn *v1alpha1.Function) {
			fn.Spec.Triggers = []v1alpha1.Trigger{{Name: "q", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "q"}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.create(t, newFunction(ns, tc.name, tc.change))
			fn := e.waitCondition(t, ns, tc.name, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
			if msg := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, tc.field) {
				t.Errorf("Ready message %q does not name %s", msg, tc.field)
			}
			e.waitEvent(t, ns, tc.name, v1alpha1.ReasonInvalidSpec, tc.field)
			for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &kedav1alpha1.ScaledObject{}} {
				if e.get(t, ns, tc.name, obj) {
					t.Errorf("a %T was created for an invalid Function", obj)
				}
			}
		})
	}
	// Fixed, the function gets its objects.
	e.updateFunction(t, ns, "no-image", func(fn *v1alpha1.Function) { fn.Spec.Image = "registry.test/hello:1" })
	waitObject(t, e, ns, "no-image", &appsv1.Deployment{})
	e.waitCondition(t, ns, "no-image", v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
}

func testInvalidAfterValid(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "spoiled", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA }))
	e.waitCondition(t, ns, "spoiled", v1alpha1.ConditionScalingReady, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForKEDA)
	objects := []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &kedav1alpha1.ScaledObject{}}
	versions := make([]string, len(objects))
	for i, obj := range objects {
		e.get(t, ns, "spoiled", obj)
		versions[i] = obj.GetResourceVersion()
	}
	e.updateFunction(t, ns, "spoiled", func(fn *v1alpha1.Function) {
		fn.Spec.Image = "registry.test/hello:2"
		fn.Spec.Scale.Owner = v1alpha1.OwnerSless
		fn.Spec.Handler = "not a handler"
	})
	e.waitCondition(t, ns, "spoiled", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	for i, obj := range objects {
		if !e.get(t, ns, "spoiled", obj) || obj.GetResourceVersion() != versions[i] {
			t.Errorf("%T of an invalid Function changed or went (version %s → %s)", obj, versions[i], obj.GetResourceVersion())
		}
	}
}

func testNameTaken(t *testing.T, e *env) {
	ns := e.namespace(t)
	labels := map[string]string{"app": "mine"}
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.test/app:1"}}},
			},
		},
	}
	e.create(t, theirs)
	e.create(t, newFunction(ns, "taken"))
	fn := e.waitCondition(t, ns, "taken", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonResourceConflict)
	if msg := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "Deployment taken") {
		t.Errorf("Ready message %q does not name the Deployment", msg)
	}
	var got appsv1.Deployment
	e.get(t, ns, "taken", &got)
	if got.ResourceVersion != theirs.ResourceVersion {
		t.Error("the controller changed a Deployment it does not own")
	}
}

func testDelete(t *testing.T, e *env, run *running) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "gone", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA }))
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &kedav1alpha1.ScaledObject{}} {
		waitObject(t, e, ns, "gone", obj)
	}
	var fn v1alpha1.Function
	e.get(t, ns, "gone", &fn)
	if err := e.c.Delete(context.Background(), &fn); err != nil {
		t.Fatal(err)
	}
	// No finalizer: the Function is gone at once, and the garbage
	// collector (not running here) deletes what it controls.
	// Gone from the controller's cache too: until then a reconcile (one
	// the deletions below cause) may create what was deleted again, as a
	// lagging cache may in any cluster, where the garbage collector ends it.
	eventually.True(t, "the controller's cache to see the Function gone", func() bool {
		err := run.mgr.GetClient().Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "gone"}, &v1alpha1.Function{})
		return apierrors.IsNotFound(err)
	})
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &kedav1alpha1.ScaledObject{}} {
		e.get(t, ns, "gone", obj)
		if err := e.c.Delete(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "the controller's cache to see the deletions", func() bool {
		err := run.mgr.GetClient().Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "gone"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err)
	})
	if _, err := run.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "gone"}}); err != nil {
		t.Fatalf("reconcile of a deleted Function: %v", err)
	}
	if e.get(t, ns, "gone", &appsv1.Deployment{}) || e.get(t, ns, "gone", &corev1.Service{}) {
		t.Error("the controller recreated objects of a deleted Function")
	}
}

// A pod whose image cannot be pulled makes InstancesReady and Ready false
// with the kubelet's cause; the pod gone, they recover.
func testInstancesFailing(t *testing.T, e *env) {
	ns := e.namespace(t)
	e.create(t, newFunction(ns, "broken"))
	e.waitCondition(t, ns, "broken", v1alpha1.ConditionInstancesReady, metav1.ConditionTrue, v1alpha1.ReasonInstancesHealthy)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken-1", Labels: map[string]string{wire.FunctionLabel: "broken"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "registry.test/nope:1"}}}}
	e.create(t, pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "function", Image: "registry.test/nope:1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.test/nope:1"`}}}}}
	if err := e.c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	fn := e.waitCondition(t, ns, "broken", v1alpha1.ConditionInstancesReady, metav1.ConditionFalse, v1alpha1.ReasonImagePullFailed)
	if reason, cause, failing := fn.Status.InstancesFailing(); !failing || reason != v1alpha1.ReasonImagePullFailed || !strings.Contains(cause, "registry.test/nope:1") {
		t.Errorf("InstancesFailing = %q %q, %v", reason, cause, failing)
	}
	if ready := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonImagePullFailed {
		t.Errorf("Ready = %+v, want False for the image", ready)
	}
	if err := e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	e.waitCondition(t, ns, "broken", v1alpha1.ConditionInstancesReady, metav1.ConditionTrue, v1alpha1.ReasonInstancesHealthy)
}
