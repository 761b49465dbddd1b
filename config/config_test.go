// Package config_test checks the manifests that install sless: the
// kustomize output of config/default is consistent with itself and with
// the commands' defaults, a real API server accepts every object, and the
// roles grant each component what it needs and little else.
package config_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"sless.dev/sless/activator"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

const namespace = "sless-system"

// render runs kustomize on config/default, as `kubectl apply -k` would.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return renderDir(t, "default")
}

// renderDir runs kustomize on the kustomization in dir.
func renderDir(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// find returns the rendered object of a kind and name, converted to out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("config/default has no %s %s", kind, name)
}

// flag returns the value of --name=value in args.
func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestManifestsAgree checks the rendered manifests against each other: each
// component runs its subcommand under its own ServiceAccount and Service,
// and the controller's flags point at the Services that exist.
func TestManifestsAgree(t *testing.T) {
	objs := render(t)
	for _, o := range objs {
		scoped := o.GetKind() != "Namespace" && o.GetKind() != "CustomResourceDefinition" &&
			o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding"
		if scoped && o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	services := map[string]corev1.Service{}
	for _, component := range []string{"controller", "activator", "autoscaler"} {
		name := "sless-" + component
		var d appsv1.Deployment
		var svc corev1.Service
		var sa corev1.ServiceAccount
		find(t, objs, "Deployment", name, &d)
		find(t, objs, "Service", name, &svc)
		find(t, objs, "ServiceAccount", name, &sa)
		services[component] = svc
		pod := d.Spec.Template
		if pod.Labels["app.kubernetes.io/name"] != name || svc.Spec.Selector["app.kubernetes.io/name"] != name {
			t.Errorf("%s: pod labels %v, service selector %v, want app.kubernetes.io/name=%s", name, pod.Labels, svc.Spec.Selector, name)
		}
		if pod.Spec.ServiceAccountName != name {
			t.Errorf("%s runs as %q", name, pod.Spec.ServiceAccountName)
		}
		c := pod.Spec.Containers[0]
		if grace := time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second; component == "activator" &&
			grace <= activator.DefaultPropagationDelay+activator.DefaultDrainTimeout {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want more than its propagation delay and drain (%v + %v)",
				name, grace, activator.DefaultPropagationDelay, activator.DefaultDrainTimeout)
		}
		if component == "activator" {
			// The activators share instances: each finds the others in its
			// Service, and itself by its pod IP.
			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if flag(c.Args, "peers-service") != svc.Name || env["POD_IP"] != "status.podIP" || env["POD_NAMESPACE"] != "metadata.namespace" {
				t.Errorf("%s: --peers-service %q, env %v: want its own Service and POD_IP, POD_NAMESPACE from the downward API",
					name, flag(c.Args, "peers-service"), env)
			}
		}
		if len(c.Args) == 0 || c.Args[0] != component {
			t.Errorf("%s runs %v, want the %s subcommand", name, c.Args, component)
		}
		for _, p := range svc.Spec.Ports {
			if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal }) {
				t.Errorf("service %s port %s targets %q, which %s does not expose", name, p.Name, p.TargetPort.StrVal, name)
			}
		}
	}

	var d appsv1.Deployment
	find(t, objs, "Deployment", "sless-controller", &d)
	c := d.Spec.Template.Spec.Containers[0]
	// The sidecars run the controller's own image, read from its Pod: a
	// flag naming an image would escape kustomize's images override.
	if slices.ContainsFunc(c.Args, func(a string) bool { return a == "--image" || strings.HasPrefix(a, "--image=") }) {
		t.Errorf("controller args %v name an image: the sidecars must run the controller's own", c.Args)
	}
	downward := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			downward[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if c.Name != controller.ControllerContainer || downward["POD_NAME"] != "metadata.name" || downward["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("controller container %q, env %v: want %q with POD_NAME and POD_NAMESPACE from the downward API, to find its own image",
			c.Name, downward, controller.ControllerContainer)
	}
	activator := services["activator"]
	if host := flag(c.Args, "activator-host"); host != activator.Name+"."+namespace+".svc" || activator.Spec.Ports[0].Port != 80 {
		t.Errorf("controller --activator-host=%q, activator Service %s port %d", host, activator.Name, activator.Spec.Ports[0].Port)
	}
	host, port, err := net.SplitHostPort(flag(c.Args, "autoscaler-address"))
	autoscaler := services["autoscaler"]
	if err != nil || host != autoscaler.Name+"."+namespace+".svc" ||
		!slices.ContainsFunc(autoscaler.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && fmt.Sprint(p.Port) == port }) {
		t.Errorf("controller --autoscaler-address=%s:%s (%v), autoscaler Service %+v", host, port, err, autoscaler.Spec.Ports)
	}
	if flag(c.Args, "activator-host") != controller.DefaultActivatorHost || flag(c.Args, "autoscaler-address") != controller.DefaultAutoscalerAddress {
		t.Error("the manifest and the controller's defaults name different Services")
	}
	var policy unstructured.Unstructured
	find(t, objs, "NetworkPolicy", "sless-autoscaler", &policy.Object)
	var role unstructured.Unstructured
	find(t, objs, "ClusterRole", "sless-controller", &role.Object)
}

// TestImageOverride installs config/default as a user would with another
// registry, through a kustomization with an images override: every
// component, the controller whose image the sidecars run among them, runs
// the image the user chose, and nothing names the default one.
func TestImageOverride(t *testing.T) {
	defaults, err := filepath.Abs("default")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, defaults)
	if err != nil {
		t.Fatal(err)
	}
	const want = "registry.example/team/sless@sha256:8d1b0c4e5f3a2b1c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c"
	kustomization := "resources:\n  - " + base + "\nimages:\n  - name: ghcr.io/sless-dev/sless\n    newName: registry.example/team/sless\n" +
		"    digest: sha256:8d1b0c4e5f3a2b1c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderDir(t, overlay)
	for _, component := range []string{"controller", "activator", "autoscaler"} {
		var d appsv1.Deployment
		find(t, objs, "Deployment", "sless-"+component, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image != want {
				t.Errorf("sless-%s container %s runs %q, want the override %q", component, c.Name, c.Image, want)
			}
			for _, a := range c.Args {
				if strings.Contains(a, "ghcr.io/sless-dev") {
					t.Errorf("sless-%s container %s has the argument %q, which the override does not reach", component, c.Name, a)
				}
			}
		}
	}
}

// TestManifestsInstall applies every rendered object to a real API server
// (server-side dry run; the namespace and the roles for real), then runs
// the controller as its ServiceAccount: the generated role must let it do
// its whole job. The activator's and the autoscaler's roles are checked
// with access reviews, both ways.
func TestManifestsInstall(t *testing.T) {
	objs := render(t)
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg, kedav1alpha1.AddToScheme)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		opts := []client.ApplyOption{client.FieldOwner("config-test"), client.ForceOwnership}
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), opts...); err != nil {
			t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if t.Failed() {
		return
	}
	t.Run("controller", func(t *testing.T) {
		checkAccess(t, c, "sless-controller", []access{
			// Its own Pod, for its image; later the Functions' pods.
			{"", "pods", "", "get", namespace, true},
			{"", "pods", "", "watch", "", true},
			{"", "pods", "", "create", "", false},
			{"", "pods", "", "delete", "", false},
		})
		runControllerAs(t, cfg, c)
	})
	t.Run("activator", func(t *testing.T) {
		checkAccess(t, c, "sless-activator", []access{
			{"sless.dev", "functions", "", "list", "", true},
			{"sless.dev", "functions", "", "watch", "", true},
			// The console's actions: a Function read afresh, then patched.
			{"sless.dev", "functions", "", "get", "", true},
			{"sless.dev", "functions", "", "patch", "", true},
			{"sless.dev", "functions", "", "delete", "", false},
			{"discovery.k8s.io", "endpointslices", "", "list", "", true},
			{"discovery.k8s.io", "endpointslices", "", "watch", "", true},
			{"sless.dev", "functions", "status", "update", "", false},
			{"apps", "deployments", "scale", "patch", "", false},
			{"", "secrets", "", "get", "", false},
		})
	})
	t.Run("autoscaler", func(t *testing.T) {
		checkAccess(t, c, "sless-autoscaler", []access{
			{"sless.dev", "functions", "", "watch", "", true},
			{"discovery.k8s.io", "endpointslices", "", "list", "", true},
			{"apps", "deployments", "", "watch", "", true},
			{"apps", "deployments", "scale", "patch", "", true},
			{"coordination.k8s.io", "leases", "", "update", namespace, true},
			{"apps", "deployments", "", "patch", "", false},
			{"coordination.k8s.io", "leases", "", "update", "default", false},
			// The url of a RabbitMQ trigger's Secret, by name; never a
			// list of them, nor a write.
			{"", "secrets", "", "get", "", true},
			{"", "secrets", "", "list", "", false},
			{"", "secrets", "", "update", "", false},
			{"", "configmaps", "", "update", "default", false},
		})
	})
}

// runControllerAs runs the controller with leader election, impersonating
// its ServiceAccount, through a Function's life: created with a RabbitMQ
// trigger (Deployment, Service, ScaledObject, TriggerAuthentication,
// status, events), then without (the KEDA objects deleted).
func runControllerAs(t *testing.T, admin *rest.Config, c client.Client) {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":sless-controller"}
	keda, err := controller.KEDAInstalled(cfg)
	if err != nil || !keda {
		t.Fatalf("KEDAInstalled as the controller = %v, %v", keda, err)
	}
	mo, err := controller.ManagerOptions(true)
	if err != nil {
		t.Fatal(err)
	}
	mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace = true, controller.Name, namespace
	mo.LeaderElectionReleaseOnCancel = true
	controlplane.ForTests(&mo)
	// Errors only: a role that lacks something shows up as refused calls.
	mo.Logger = logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	// The controller's own image, from its Pod, as `sless controller`
	// reads it to give the sidecars.
	bg := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "sless-controller-5c7b9"}, Spec: corev1.PodSpec{
		ServiceAccountName: "sless-controller",
		Containers:         []corev1.Container{{Name: controller.ControllerContainer, Image: "registry.test/sless:1"}},
	}}
	if err := c.Create(bg, pod); err != nil {
		t.Fatal(err)
	}
	image, err := controller.OwnImage(bg, mgr.GetAPIReader(), namespace, pod.Name)
	if err != nil || image != "registry.test/sless:1" {
		t.Fatalf("OwnImage as the controller = %q, %v; want its Pod's image", image, err)
	}
	opts := controller.Options{Image: image, ActivatorHost: controller.DefaultActivatorHost,
		AutoscalerAddress: controller.DefaultAutoscalerAddress, KEDA: true}
	if err := controller.New(mgr, opts).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	controlplane.StartManager(t, mgr)

	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orders"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "registry.test/orders:1", Triggers: []v1alpha1.Trigger{
			{Name: "new", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "orders", ConnectionSecret: "amqp"}},
		}},
	}
	if err := c.Create(bg, fn); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "default", Name: "orders"}
	exists := func(obj client.Object, name string) bool {
		return c.Get(bg, types.NamespacedName{Namespace: "default", Name: name}, obj) == nil
	}
	eventually.True(t, "the Function's objects and status", func() bool {
		if err := c.Get(bg, key, fn); err != nil {
			t.Fatal(err)
		}
		return exists(&appsv1.Deployment{}, "orders") && exists(&corev1.Service{}, "orders") &&
			exists(&kedav1alpha1.ScaledObject{}, "orders") && exists(&kedav1alpha1.TriggerAuthentication{}, "orders.new") &&
			fn.Status.ObservedGeneration == fn.Generation && len(fn.Status.Conditions) == 5 &&
			// Read as the controller: a role without it says "forbidden".
			strings.Contains(conditionMessage(fn, v1alpha1.ConditionTriggersReady), "the Secret amqp not found")
	})
	eventually.True(t, "an event about the Function", func() bool {
		var events eventsv1.EventList
		if err := c.List(bg, &events, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "orders" && e.Reason == "Created" && e.ReportingController == controller.Name
		})
	})
	for range 20 {
		fn.Spec.Triggers = []v1alpha1.Trigger{{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}}}
		if err := c.Update(bg, fn); err == nil {
			break
		}
		if err := c.Get(bg, key, fn); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "the KEDA objects deleted", func() bool {
		return !exists(&kedav1alpha1.ScaledObject{}, "orders") && !exists(&kedav1alpha1.TriggerAuthentication{}, "orders.new")
	})
}

// access is one request a component makes, or must not be able to make.
func conditionMessage(fn *v1alpha1.Function, typ string) string {
	if c := meta.FindStatusCondition(fn.Status.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

type access struct {
	group, resource, subresource, verb, namespace string
	allowed                                       bool
}

// checkAccess asks the API server whether the ServiceAccount may do each
// thing.
func checkAccess(t *testing.T, c client.Client, account string, want []access) {
	t.Helper()
	for _, a := range want {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":" + account,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: a.group, Resource: a.resource, Subresource: a.subresource, Verb: a.verb, Namespace: a.namespace,
			},
		}}
		if err := c.Create(context.Background(), review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != a.allowed {
			t.Errorf("%s may %s %s/%s %s in %q: %v, want %v", account, a.verb, a.group, a.resource, a.subresource, a.namespace, review.Status.Allowed, a.allowed)
		}
	}
}

// TestKubernetesSamples checks the samples for kubectl are valid for
// Kubernetes by the shared validation and accepted by a real API server.
func TestKubernetesSamples(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("samples", "kubernetes", "functions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fns, err := v1alpha1.DecodeManifest(data)
	if err != nil || len(fns) == 0 {
		t.Fatalf("decode: %d functions, %v", len(fns), err)
	}
	c := controlplane.Client(t, controlplane.Start(t))
	for i := range fns {
		fn := &fns[i]
		if err := c.Create(context.Background(), fn.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("%s: the API server refused it: %v", fn.Name, err)
		}
		fn.Default()
		if errs := v1alpha1.Validate(fn, v1alpha1.ModeKubernetes); len(errs) > 0 {
			t.Errorf("%s: %v", fn.Name, errs.ToAggregate())
		}
	}
}
