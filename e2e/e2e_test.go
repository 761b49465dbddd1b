//go:build e2e

// Package e2e tests sless end to end on a real one-node cluster: `make
// cluster` (kubelet, containerd, kube-proxy, CoreDNS, a registry) with sless
// installed by `make deploy` from its own images and manifests. Run with
// `make test-e2e`, which brings both up; the tests assert behaviour, never
// speed.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// The cluster, as `make cluster deploy` leaves it; the environment may
// point elsewhere.
var (
	root       = repoRoot()
	kubeconfig = envOr("SLESS_E2E_KUBECONFIG", filepath.Join(root, "bin/cluster/kubeconfig"))
	kubectlBin = envOr("SLESS_E2E_KUBECTL", "kubectl")
	slessBin   = envOr("SLESS_E2E_SLESS", filepath.Join(root, "bin/sless"))
	registry   = envOr("SLESS_E2E_REGISTRY", "127.0.0.1:5000")
	// bases is where make deploy pushed the runtime base images.
	bases = registry + "/sless"
)

// cluster is what every test reaches the cluster by.
var cluster struct {
	c client.Client
	// activator and admin are the activator Service's invocation and
	// admin URLs, by its cluster IP (reachable from this machine).
	activator, admin string
}

func TestMain(m *testing.M) {
	if err := connect(); err != nil {
		if needs.CI() {
			fmt.Fprintf(os.Stderr, "e2e: the test cluster is needed in CI: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "e2e: skipped, no test cluster (make cluster deploy): %v\n", err)
		os.Exit(0)
	}
	code := m.Run()
	if err := clusterAlive(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

// clusterAlive checks that every process make cluster started still runs
// after the tests: one that died under them (kube-proxy exits when its
// configuration file is rewritten) leaves the cluster broken for what
// follows, whatever the tests saw.
func clusterAlive() error {
	dir := filepath.Join(filepath.Dir(kubeconfig), "pids")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // a cluster not started by make cluster
	}
	var dead []string
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			dead = append(dead, e.Name())
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("cluster processes no longer running: %s (logs in %s)", strings.Join(dead, ", "), filepath.Join(filepath.Dir(dir), "logs"))
	}
	return nil
}

func connect() error {
	if _, err := os.Stat(kubeconfig); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if cluster.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, name := range []string{"sless-controller", "sless-activator", "sless-autoscaler"} {
		if err := waitAvailable(ctx, "sless-system", name); err != nil {
			return err
		}
	}
	var svc corev1.Service
	if err := cluster.c.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-activator"}, &svc); err != nil {
		return err
	}
	cluster.activator = "http://" + svc.Spec.ClusterIP
	cluster.admin = "http://" + svc.Spec.ClusterIP + ":9090"
	return nil
}

// waitAvailable waits for a Deployment's every replica to be available.
func waitAvailable(ctx context.Context, namespace, name string) error {
	for {
		var d appsv1.Deployment
		err := cluster.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &d)
		if err == nil && d.Spec.Replicas != nil && d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s/%s not available: %v", namespace, name, err)
		case <-time.After(time.Second):
		}
	}
}

// namespace creates a namespace for one test, prefix and a random suffix
// (the last run's may still be going), enforcing Pod Security "restricted"
// as a careful cluster would, and deletes it when the test ends.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	name := prefix + "-" + strings.ToLower(rand.Text()[:6])
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if err := cluster.c.Create(context.Background(), ns); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, name)
		}
		_ = cluster.c.Delete(context.Background(), ns)
	})
	return name
}

// dumpNamespace logs what a failed test leaves in its namespace.
func dumpNamespace(t *testing.T, ns string) {
	out, _ := kubectl(t, "-n", ns, "get", "functions,deployments,pods,events", "-o", "wide")
	t.Logf("namespace %s:\n%s", ns, out)
}

// kubectl runs the cluster's kubectl.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// sless runs the sless CLI, failing the test when it fails.
func sless(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(slessBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "SLESS_REGISTRY="+registry, "SLESS_BASE_REGISTRY="+bases)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("sless %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// invoke calls a function through the activator.
func invoke(ns, name, rest string) (int, string, error) {
	resp, err := httpClient.Get(cluster.activator + "/fn/" + ns + "/" + name + rest)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// httpClient bounds every call: a function at zero starts in seconds, and
// no test waits on a hung connection.
var httpClient = &http.Client{Timeout: 2 * time.Minute}

// pods lists a function's pods.
func pods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := cluster.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{wire.FunctionLabel: name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// function reads a Function.
func function(t *testing.T, ns, name string) *v1alpha1.Function {
	t.Helper()
	var fn v1alpha1.Function
	if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		t.Fatal(err)
	}
	return &fn
}

// within is the bound of waits on the cluster: pods start in seconds, but a
// loaded 2-core machine can take much longer.
const within = 3 * time.Minute

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.TrueWithin(t, within, what, cond)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// repoRoot is the checkout the tests run in (they run in e2e/).
func repoRoot() string {
	dir, err := filepath.Abs("..")
	if err != nil {
		return ".."
	}
	return dir
}
