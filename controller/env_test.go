package controller_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

func TestMain(m *testing.M) {
	// controller-runtime logs through logr; errors only, so that a failing
	// test shows why without the noise of a passing one.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	os.Exit(m.Run())
}

// testOptions are the reconciler options of the tests.
var testOptions = controller.Options{
	Image:             "ghcr.io/sless-dev/sless:test",
	ActivatorHost:     "activator.test",
	AutoscalerAddress: "autoscaler.test:9095",
	RecordsURL:        "http://activator.test:9090",
	KEDA:              true,
	Workers:           4,
}

// env is a real API server with a client that reads past any cache.
type env struct {
	cfg *rest.Config
	c   client.Client
}

func newEnv(t *testing.T) *env {
	cfg := controlplane.Start(t)
	return &env{cfg: cfg, c: controlplane.Client(t, cfg, kedav1alpha1.AddToScheme)}
}

// running is a started manager, and a reconciler built on it that a test
// may call directly.
type running struct {
	mgr  manager.Manager
	r    *controller.FunctionReconciler
	stop func()
}

// start runs a manager with the reconciler; register false leaves the
// reconciler unregistered, for tests that call Reconcile themselves.
// newClient, when set, builds the manager's client.
func (e *env) start(t *testing.T, opts controller.Options, register bool, newClient client.NewClientFunc) *running {
	t.Helper()
	mo, err := controller.ManagerOptions(opts.KEDA)
	if err != nil {
		t.Fatal(err)
	}
	controlplane.ForTests(&mo)
	mo.NewClient = newClient
	mgr, err := manager.New(e.cfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	r := controller.New(mgr, opts)
	if register {
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	stop := controlplane.StartManager(t, mgr)
	return &running{mgr: mgr, r: r, stop: stop}
}

// namespace creates a namespace of its own for a test.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fn-"}}
	if err := e.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newFunction is a valid Function for Kubernetes; change adjusts it.
func newFunction(ns, name string, change ...func(*v1alpha1.Function)) *v1alpha1.Function {
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "registry.test/hello:1"},
	}
	for _, c := range change {
		c(fn)
	}
	return fn
}

func (e *env) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

// updateFunction reads a Function, changes it and writes it back, retrying
// on conflicts with the controller's status writes.
func (e *env) updateFunction(t *testing.T, ns, name string, change func(*v1alpha1.Function)) {
	t.Helper()
	for range 20 {
		var fn v1alpha1.Function
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &fn); err != nil {
			t.Fatal(err)
		}
		change(&fn)
		err := e.c.Update(context.Background(), &fn)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update function %s: %v", name, err)
		}
	}
	t.Fatalf("update function %s: conflicts did not stop", name)
}

// get reads an object, reporting whether it exists.
func (e *env) get(t *testing.T, ns, name string, obj client.Object) bool {
	t.Helper()
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// waitObject waits until the object exists and returns it filled.
func waitObject[T client.Object](t *testing.T, e *env, ns, name string, obj T) T {
	t.Helper()
	eventually.True(t, "object "+ns+"/"+name, func() bool { return e.get(t, ns, name, obj) })
	return obj
}

// waitCondition waits until the Function's condition has status and reason
// for its current generation, and returns the Function.
func (e *env) waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.Function {
	t.Helper()
	var fn v1alpha1.Function
	eventually.True(t, typ+"="+string(status)+" ("+reason+") on "+name, func() bool {
		if !e.get(t, ns, name, &fn) || fn.Status.ObservedGeneration != fn.Generation {
			return false
		}
		c := meta.FindStatusCondition(fn.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == fn.Generation
	})
	return &fn
}

// markAvailable plays the Deployment controller: all replicas are ready.
func (e *env) markAvailable(t *testing.T, ns, name string) {
	t.Helper()
	var d appsv1.Deployment
	e.get(t, ns, name, &d)
	n := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: "rolled out"},
		},
	}
	if err := e.c.Status().Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
}

// markKEDAReady plays KEDA: the ScaledObject is ready.
func (e *env) markKEDAReady(t *testing.T, ns, name string) {
	t.Helper()
	var so kedav1alpha1.ScaledObject
	e.get(t, ns, name, &so)
	so.Status.Conditions = kedav1alpha1.Conditions{
		{Type: kedav1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "ScaledObjectReady", Message: "ScaledObject is defined correctly and is ready for scaling"},
	}
	if err := e.c.Status().Update(context.Background(), &so); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an event about the Function with the given reason
// whose note contains text.
func (e *env) waitEvent(t *testing.T, ns, name, reason, text string) {
	t.Helper()
	eventually.True(t, "event "+reason+" on "+name, func() bool {
		var list eventsv1.EventList
		if err := e.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Regarding.Kind == "Function" && ev.Reason == reason && strings.Contains(ev.Note, text) {
				return true
			}
		}
		return false
	})
}

// envMap is a container's environment as a map of plain values.
func envMap(c corev1.Container) map[string]string {
	m := make(map[string]string, len(c.Env))
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// container returns the named container of a pod template.
func container(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("deployment %s has no container %s", d.Name, name)
	return corev1.Container{}
}

// controlledBy fails unless obj has fn as its controller, blocking the
// owner's foreground deletion, so that garbage collection removes it.
func controlledBy(t *testing.T, obj client.Object, fn *v1alpha1.Function) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != fn.UID || ref.Kind != "Function" || ref.APIVersion != v1alpha1.GroupVersion.String() ||
		!ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("%s %s: controller reference %+v, want Function %s (uid %s) blocking deletion", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), ref, fn.Name, fn.UID)
	}
}
