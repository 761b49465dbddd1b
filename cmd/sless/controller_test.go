package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
		`--image string`, `(default the controller's own; outside a pod ghcr.io/sless-dev/sless:` + buildVersion() + `)`,
		`--keda-recheck duration`, `(default 30s)`,
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
		{"no KEDA recheck", []string{"--keda-recheck", "0s"}, "--keda-recheck 0s: must be positive"},
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

// TestControllerSidecarImage: --image wins; outside a pod, without it, the
// sidecars run this version's published image, and nothing is read.
func TestControllerSidecarImage(t *testing.T) {
	for _, tc := range []struct{ flag, image, from string }{
		{"registry.test/sless:1", "registry.test/sless:1", "--image"},
		{"", "ghcr.io/sless-dev/sless:" + buildVersion(), "default"},
	} {
		image, from, err := sidecarImage(context.Background(), nil, tc.flag, "", "")
		if err != nil || image != tc.image || from != tc.from {
			t.Errorf("sidecarImage(--image %q) = %q, %q, %v; want %q from %s", tc.flag, image, from, err, tc.image, tc.from)
		}
	}
}

// TestControllerInPod runs `sless controller` as its Deployment does,
// without --image and with POD_NAMESPACE and POD_NAME naming its Pod: the
// sidecars run the image of the Pod's controller container. KEDA, absent
// at start, is then installed: the controller exits 0, saying why, for
// its Deployment to start it again with KEDA. A Pod that is not there is
// an error at start, naming it.
func TestControllerInPod(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg, apiextensionsv1.AddToScheme)
	ctx := context.Background()
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		t.Fatal(err)
	}
	var keda []apiextensionsv1.CustomResourceDefinition
	for _, crd := range crds.Items {
		if crd.Spec.Group != "keda.sh" {
			continue
		}
		keda = append(keda, crd)
		// Once its storage is ready (a list waits for it): deleted before,
		// a CRD stays for minutes, its objects not listable for deletion.
		objects := &unstructured.UnstructuredList{}
		objects.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Kind: crd.Spec.Names.ListKind})
		if err := c.List(ctx, objects); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &crd); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "KEDA's CRDs gone", func() bool {
		var left apiextensionsv1.CustomResourceDefinitionList
		if err := c.List(ctx, &left); err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(left.Items, func(crd apiextensionsv1.CustomResourceDefinition) bool { return crd.Spec.Group == "keda.sh" })
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sless-controller-6f8d"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: controller.ControllerContainer, Image: "registry.test/team/sless:own"}},
	}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	kubeconfig := "KUBECONFIG=" + writeKubeconfig(t, cfg)

	bounded, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	missing := exec.CommandContext(bounded, os.Args[0], "controller", "--admin", "127.0.0.1:0", "--leader-election-namespace", "default")
	missing.Env = append(os.Environ(), runMainEnv+"=1", kubeconfig, "POD_NAMESPACE=default", "POD_NAME=gone")
	if out, err := missing.CombinedOutput(); err == nil || !strings.Contains(string(out), `own image: read pod default/gone: pods "gone" not found`) {
		t.Errorf("sless controller in a missing Pod: %v\n%s\nwant an error naming the Pod", err, out)
	}

	cmd := exec.Command(os.Args[0], "controller", "--admin", "127.0.0.1:"+strconv.Itoa(testfn.FreePort(t)),
		"--leader-election-namespace", "default", "--keda-recheck", "100ms")
	cmd.Env = append(os.Environ(), runMainEnv+"=1", kubeconfig, "POD_NAMESPACE=default", "POD_NAME="+pod.Name)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// The log, passed on, with the line that says why it exits kept.
	exiting := make(chan string, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			fmt.Fprintln(os.Stderr, lines.Text())
			if strings.Contains(lines.Text(), "controller exiting") {
				select {
				case exiting <- lines.Text():
				default:
				}
			}
		}
	}()

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
		if ct.Name == controller.QueueProxyContainer && ct.Image != "registry.test/team/sless:own" {
			t.Errorf("queue-proxy image = %q, want the controller Pod's", ct.Image)
		}
	}

	for _, crd := range keda {
		if err := c.Create(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name}, Spec: crd.Spec}); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan error, 1)
	go func() {
		<-logged // Wait must not close the pipe before the log is read
		exited <- cmd.Wait()
	}()
	waitExit(t, "controller, KEDA installed", exited, 60*time.Second)
	select {
	case line := <-exiting:
		if !strings.Contains(line, "KEDA was installed") || !strings.Contains(line, "TriggerAuthentications are served now") {
			t.Errorf("exit line %s does not say KEDA was installed", line)
		}
	default:
		t.Error("the controller exited without saying why")
	}
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
