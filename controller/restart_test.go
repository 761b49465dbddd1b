package controller_test

import (
	"context"
	"sync/atomic"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
)

// TestRestartMakesNoWrites stops a controller once its Functions have
// settled and reconciles every one with a new controller, whose client
// counts writes: server-set defaults in the live objects must not look
// like differences, so there are none, and no resourceVersion moves.
func TestRestartMakesNoWrites(t *testing.T) {
	e := newEnv(t)
	first := e.start(t, testOptions, true, nil)
	ns := e.namespace(t)
	functions := []*v1alpha1.Function{
		newFunction(ns, "plain"),
		newFunction(ns, "ready", func(fn *v1alpha1.Function) {
			fn.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
			fn.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}),
		newFunction(ns, "keda", func(fn *v1alpha1.Function) { fn.Spec.Scale.Owner = v1alpha1.OwnerKEDA }),
		newFunction(ns, "queue", func(fn *v1alpha1.Function) {
			fn.Spec.Triggers = []v1alpha1.Trigger{{Name: "q", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "q", ConnectionSecret: "amqp"}}}
		}),
		newFunction(ns, "broken", func(fn *v1alpha1.Function) { fn.Spec.Image = "" }),
		newFunction(ns, "root", func(fn *v1alpha1.Function) {
			fn.Spec.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0),
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
		}),
	}
	for _, fn := range functions {
		e.create(t, fn)
	}
	e.waitCondition(t, ns, "plain", v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
	e.waitCondition(t, ns, "broken", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	e.waitCondition(t, ns, "root", v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonRolloutPending)
	e.waitCondition(t, ns, "queue", v1alpha1.ConditionScalingReady, metav1.ConditionUnknown, v1alpha1.ReasonWaitingForKEDA)
	waitObject(t, e, ns, "keda", &kedav1alpha1.ScaledObject{})
	e.markAvailable(t, ns, "ready")
	e.markKEDAReady(t, ns, "keda")
	e.waitCondition(t, ns, "ready", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	e.waitCondition(t, ns, "keda", v1alpha1.ConditionScalingReady, metav1.ConditionTrue, v1alpha1.ReasonScaledObjectReady)
	first.stop()

	before := e.versions(t, ns)
	var writes atomic.Int64
	second := e.start(t, testOptions, false, func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.New(cfg, o)
		return &countingClient{Client: c, writes: &writes}, err
	})
	for _, fn := range functions {
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fn.Name}}
		if _, err := second.r.Reconcile(context.Background(), req); err != nil {
			t.Errorf("reconcile %s: %v", fn.Name, err)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("a restarted controller made %d writes to a settled cluster", n)
	}
	after := e.versions(t, ns)
	for key, v := range before {
		if after[key] != v {
			t.Errorf("%s: resourceVersion %s → %s", key, v, after[key])
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d objects before, %d after", len(before), len(after))
	}
}

// versions maps every object of interest in ns to its resourceVersion.
func (e *env) versions(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, list := range map[string]client.ObjectList{
		"Function":              &v1alpha1.FunctionList{},
		"Deployment":            &appsv1.DeploymentList{},
		"Service":               &corev1.ServiceList{},
		"ScaledObject":          &kedav1alpha1.ScaledObjectList{},
		"TriggerAuthentication": &kedav1alpha1.TriggerAuthenticationList{},
	} {
		if err := e.c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			m, err := meta.Accessor(item)
			if err != nil {
				t.Fatal(err)
			}
			out[kind+" "+m.GetName()] = m.GetResourceVersion()
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d objects in %s: %v", len(out), ns, out)
	}
	return out
}

// countingClient counts the writes made through it, subresources included.
type countingClient struct {
	client.Client
	writes *atomic.Int64
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes.Add(1)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes.Add(1)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.writes.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return countingWriter{c.Client.Status(), c.writes}
}

func (c *countingClient) SubResource(name string) client.SubResourceClient {
	sub := c.Client.SubResource(name)
	return countingSubResource{sub, countingWriter{sub, c.writes}}
}

type countingWriter struct {
	client.SubResourceWriter
	writes *atomic.Int64
}

func (w countingWriter) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	w.writes.Add(1)
	return w.SubResourceWriter.Create(ctx, obj, sub, opts...)
}

func (w countingWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	w.writes.Add(1)
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.writes.Add(1)
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// countingSubResource reads through and counts its writes.
type countingSubResource struct {
	client.SubResourceReader
	countingWriter
}
