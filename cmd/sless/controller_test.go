package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

func TestControllerHelpListsFlags(t *testing.T) {
	out, err := run("controller", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`--image string`, `(default "ghcr.io/sless-dev/sless:` + buildVersion() + `")`,
		`--activator-host string`, `(default "sless-activator.sless-system.svc")`,
		`--autoscaler-address string`, `(default "sless-autoscaler.sless-system.svc:9095")`,
		`--workers int`, `(default 8)`,
		`--admin string`, `(default ":9090")`,
		`--leader-elect`, `(default true)`,
		`--leader-election-namespace string`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sless controller --help lacks %q:\n%s", want, out)
		}
	}
}

// TestControllerFlagErrors: values that cannot work are refused before
// anything starts, naming the flag.
func TestControllerFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no image", []string{"--image", ""}, "--image"},
		{"no activator", []string{"--activator-host", ""}, "--activator-host"},
		{"no workers", []string{"--workers", "0"}, "--workers 0: must be at least 1"},
		{"autoscaler without port", []string{"--autoscaler-address", "sless-autoscaler"}, `--autoscaler-address "sless-autoscaler": want host:port`},
		{"admin without port", []string{"--admin", "localhost"}, `--admin "localhost": want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(append([]string{"controller"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sless controller %v = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestControllerCommand runs `sless controller` as a real process against a
// real API server: it takes the lease, turns a Function into a Deployment
// whose sidecar runs --image, serves health and metrics on --admin, and
// exits 0 on SIGTERM.
func TestControllerCommand(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	admin := "127.0.0.1:" + strconv.Itoa(testfn.FreePort(t))
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + writeKubeconfig(t, cfg)}, "controller", "--admin", admin,
		"--leader-election-namespace", "default", "--image", "registry.test/sless:e2e", "--activator-host", "gateway.test")

	ctx := context.Background()
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec:       v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "registry.test/hello:1"},
	}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	eventually.TrueWithin(t, 30*time.Second, "the Function's Deployment", func() bool {
		return c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "hello"}, &d) == nil
	})
	for _, ct := range d.Spec.Template.Spec.Containers {
		if ct.Name == controller.QueueProxyContainer && ct.Image != "registry.test/sless:e2e" {
			t.Errorf("queue-proxy image = %q, want --image", ct.Image)
		}
	}
	eventually.TrueWithin(t, 30*time.Second, "the Function's status URL", func() bool {
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "hello"}, fn); err != nil {
			t.Fatal(err)
		}
		return fn.Status.URL == "http://gateway.test/fn/default/hello"
	})

	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := fetch(t, "http://"+admin+path, ""); code != http.StatusOK {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	code, body := fetch(t, "http://"+admin+"/metrics", "")
	if code != http.StatusOK || !strings.Contains(body, `controller_runtime_reconcile_total{controller="function",result="success"}`) ||
		!strings.Contains(body, `leader_election_master_status{name="sless-controller"} 1`) {
		t.Errorf("/metrics: %d, want reconcile counts and the leader status:\n%s", code, body)
	}

	stopAndWait(t, "controller", cmd, exited, syscall.SIGTERM, 30*time.Second)
}

// TestControllerLeaseNamespaceDefault: outside a cluster and without
// --leader-election-namespace, `sless controller` takes its Lease in the
// kubeconfig context's namespace, or sless-system when the context names
// none. (It failed to start: "unable to find leader election namespace".)
func TestControllerLeaseNamespaceDefault(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	for _, tt := range []struct{ contextNamespace, want string }{{"team-a", "team-a"}, {"", "sless-system"}} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tt.want}}); err != nil {
			t.Fatal(err)
		}
		admin := "127.0.0.1:" + strconv.Itoa(testfn.FreePort(t))
		cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + writeKubeconfigIn(t, cfg, tt.contextNamespace)},
			"controller", "--admin", admin, "--image", "registry.test/sless:e2e")
		eventually.TrueWithin(t, 30*time.Second, "the Lease in "+tt.want, func() bool {
			var lease coordinationv1.Lease
			return c.Get(ctx, types.NamespacedName{Namespace: tt.want, Name: "sless-controller"}, &lease) == nil
		})
		stopAndWait(t, "controller", cmd, exited, syscall.SIGTERM, 30*time.Second)
	}
}
