package config_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/controller"
	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/adminauth/kubetoken"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// activatorPorts are the activator's invocation and admin ports, from its
// Deployment's flags, checked against its container's named ports.
func activatorPorts(t *testing.T, d *appsv1.Deployment) (invocations, admin int) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	port := func(flagName, portName string) int {
		_, p, err := net.SplitHostPort(flag(c.Args, flagName))
		n, _ := strconv.Atoi(p)
		if err != nil || n == 0 {
			t.Fatalf("activator --%s=%q: want host:port", flagName, flag(c.Args, flagName))
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == portName && int(cp.ContainerPort) == n }) {
			t.Errorf("activator --%s=%s, but its container port %q is not %d", flagName, flag(c.Args, flagName), portName, n)
		}
		return n
	}
	return port("listen", "http"), port("admin", "admin")
}

// peer is a pod that would connect to an activator.
type peer struct {
	namespace string
	labels    map[string]string
}

// admits reports whether policy lets from connect to port of the pods it
// selects, by the NetworkPolicy rules: a rule admits its ports (all when
// none) from its peers (everyone when none); a peer with a pod selector
// alone means pods of the policy's namespace, with a namespace selector
// pods of the namespaces it selects. Namespaces carry the label
// kubernetes.io/metadata.name, as the API server sets it.
func admits(t *testing.T, policy *networkingv1.NetworkPolicy, from peer, port int) bool {
	t.Helper()
	selects := func(s *metav1.LabelSelector, set map[string]string) bool {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatalf("selector %v: %v", s, err)
		}
		return sel.Matches(labels.Set(set))
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": from.namespace}
	for _, rule := range policy.Spec.Ingress {
		portOK := len(rule.Ports) == 0 || slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && p.Port.IntValue() == port && ptr.Deref(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP
		})
		peerOK := len(rule.From) == 0 || slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
			if p.IPBlock != nil {
				t.Fatalf("the policy admits an IP block %v: pods are named by labels here", p.IPBlock)
			}
			if p.NamespaceSelector == nil && from.namespace != policy.Namespace {
				return false
			}
			if p.NamespaceSelector != nil && !selects(p.NamespaceSelector, nsLabels) {
				return false
			}
			return p.PodSelector == nil || selects(p.PodSelector, from.labels)
		})
		if portOK && peerOK {
			return true
		}
	}
	return false
}

// TestActivatorNetworkPolicy checks the shape of the activators'
// NetworkPolicy in the rendered config/default (the test cluster's CNI
// does not enforce policies): it selects the activator's pods, admits
// anyone to the invocation port, and to the admin port only sless-system's
// pods (the autoscaler's cron fires), function pods of any namespace (the
// queue-proxies' records, which go to the admin port) and Prometheus; no
// other port; and a real API server accepts it.
func TestActivatorNetworkPolicy(t *testing.T) {
	objs := render(t)
	var policy networkingv1.NetworkPolicy
	var d appsv1.Deployment
	find(t, objs, "NetworkPolicy", "sless-activator", &policy)
	find(t, objs, "Deployment", "sless-activator", &d)
	if policy.Namespace != namespace || d.Namespace != namespace {
		t.Fatalf("policy in %q, activators in %q, want both in %s", policy.Namespace, d.Namespace, namespace)
	}
	if !selectsPod(t, policy.Spec.PodSelector, d.Spec.Template.Labels) {
		t.Errorf("the policy selects %v, not the activators' pods %v", policy.Spec.PodSelector, d.Spec.Template.Labels)
	}
	if !slices.Equal(policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want Ingress only (the activators reach instances in every namespace)", policy.Spec.PolicyTypes)
	}
	invocations, admin := activatorPorts(t, &d)
	// The queue-proxies' records go to the activators' admin port: the
	// reason function pods are admitted to it.
	if u, err := url.Parse(controller.DefaultRecordsURL); err != nil || u.Port() != strconv.Itoa(admin) {
		t.Errorf("the controller's --records-url %s is not the admin port %d: the policy's rule for function pods needs another look",
			controller.DefaultRecordsURL, admin)
	}
	fnPod := map[string]string{wire.FunctionLabel: "hello", wire.NamespaceLabel: "team-a"}
	for _, tc := range []struct {
		what   string
		from   peer
		port   int
		admits bool
	}{
		{"a pod of a user's namespace, invoking", peer{"team-a", nil}, invocations, true},
		{"a pod of a user's namespace, at the admin port", peer{"team-a", map[string]string{"app": "web"}}, admin, false},
		{"a pod of kube-system, at the admin port", peer{"kube-system", nil}, admin, false},
		{"the autoscaler, sending cron fires", peer{namespace, map[string]string{"app.kubernetes.io/name": "sless-autoscaler"}}, admin, true},
		{"any pod of sless-system, at the admin port", peer{namespace, nil}, admin, true},
		{"a function's pod (its queue-proxy's records)", peer{"team-a", fnPod}, admin, true},
		{"Prometheus, scraping", peer{"monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}}, admin, true},
		{"a function's pod, at another port", peer{"team-a", fnPod}, 9091, false},
		{"sless-system, at another port", peer{namespace, nil}, 9095, false},
	} {
		if got := admits(t, &policy, tc.from, tc.port); got != tc.admits {
			t.Errorf("%s (%s %v → %d): admitted %v, want %v", tc.what, tc.from.namespace, tc.from.labels, tc.port, got, tc.admits)
		}
	}

	c := controlplane.Client(t, controlplane.Start(t))
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, policy.DeepCopy()); err != nil {
		t.Fatalf("the API server refuses the policy: %v", err)
	}
}

func selectsPod(t *testing.T, s metav1.LabelSelector, pod map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&s)
	if err != nil {
		t.Fatal(err)
	}
	return !sel.Empty() && sel.Matches(labels.Set(pod))
}

// TestActivatorAdminToken checks how the activators find the admin token:
// by the Secret their --admin-secret names in their namespace, which their
// Role lets them read and watch by name and create, and not by a variable
// read once at the start (a rotation would need a restart).
func TestActivatorAdminToken(t *testing.T) {
	objs := render(t)
	var d appsv1.Deployment
	var role rbacv1.Role
	find(t, objs, "Deployment", "sless-activator", &d)
	find(t, objs, "Role", "sless-activator-admin-token", &role)
	c := d.Spec.Template.Spec.Containers[0]
	secret := flag(c.Args, "admin-secret")
	if secret != kubetoken.DefaultName {
		t.Errorf("activator --admin-secret=%q, want %s, the Secret the docs and the autoscaler name", secret, kubetoken.DefaultName)
	}
	for _, e := range c.Env {
		if e.Name == "SLESS_ADMIN_TOKEN" {
			t.Errorf("the activator sets SLESS_ADMIN_TOKEN, which pins the token at the start: it follows its Secret")
		}
	}
	if role.Namespace != d.Namespace {
		t.Errorf("the admin token's Role is in %q, the activators in %q", role.Namespace, d.Namespace)
	}
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 && !slices.Equal(r.ResourceNames, []string{secret}) {
			t.Errorf("the Role names Secrets %v, want only %s", r.ResourceNames, secret)
		}
	}
}

// TestActivatorAdminTokenRole installs the rendered roles on a real API
// server and checks the activator's access to Secrets both ways, then runs
// the activators' token keeper as the activator's ServiceAccount: it
// creates the Secret, and follows its rotation and deletion through a
// watch by name, which the Role must allow.
func TestActivatorAdminTokenRole(t *testing.T) {
	objs := render(t)
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("config-test")); err != nil {
				t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	const account = "system:serviceaccount:" + namespace + ":sless-activator"
	for _, a := range []struct {
		verb, name, namespace string
		allowed               bool
	}{
		{"get", kubetoken.DefaultName, namespace, true},
		{"list", kubetoken.DefaultName, namespace, true},
		{"watch", kubetoken.DefaultName, namespace, true},
		{"create", "", namespace, true},
		{"update", kubetoken.DefaultName, namespace, false},
		{"patch", kubetoken.DefaultName, namespace, false},
		{"delete", kubetoken.DefaultName, namespace, false},
		{"get", "sless-database", namespace, false},
		{"list", "", namespace, false},
		{"watch", "", namespace, false},
		{"get", kubetoken.DefaultName, "default", false},
		{"create", "", "default", false},
		{"list", "", "", false},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   account,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Resource: "secrets", Verb: a.verb, Name: a.name, Namespace: a.namespace,
			},
		}}
		if err := c.Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != a.allowed {
			t.Errorf("sless-activator may %s secrets %q in %q: %v, want %v", a.verb, a.name, a.namespace, review.Status.Allowed, a.allowed)
		}
	}

	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: account}
	guard := &adminauth.Guard{}
	keeper, err := kubetoken.New(as, namespace, kubetoken.DefaultName, guard, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	keeper.Generate = true
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := keeper.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	token := func() string {
		s, err := kube.CoreV1().Secrets(namespace).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return string(s.Data[kubetoken.Key])
	}
	generated := token()
	if st := guard.Load(); generated == "" || st.Token != generated {
		t.Fatalf("as the activator: Secret token %d characters, guard %q: want the Secret created and its token held", len(generated), st.Refused)
	}
	select {
	case <-keeper.Synced():
	case <-time.After(eventually.Within):
		t.Fatal("the activator's watch of its Secret did not sync: the Role must allow list and watch by name")
	}
	patch, _ := json.Marshal(map[string]any{"data": map[string][]byte{kubetoken.Key: []byte("rotated")}})
	if _, err := kube.CoreV1().Secrets(namespace).Patch(ctx, kubetoken.DefaultName, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the rotated token held", func() bool { return guard.Load().Token == "rotated" })
	if err := kube.CoreV1().Secrets(namespace).Delete(ctx, kubetoken.DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the deleted Secret recreated with a new token, and held", func() bool {
		t := token()
		return t != "" && t != generated && t != "rotated" && guard.Load().Token == t && !strings.ContainsAny(t, "+/=")
	})
}
