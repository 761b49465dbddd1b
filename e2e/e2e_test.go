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
	"encoding/json"
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

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/activator"
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

// nodeIP is this machine's address on the cluster's bridge (make cluster's
// NODE_IP): pods reach the machine's RabbitMQ and PostgreSQL there, relayed,
// and a test's own servers listening on it.
const nodeIP = "10.244.0.1"

// cluster is what every test reaches the cluster by.
var cluster struct {
	c client.WithWatch
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
	if err := kedav1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if cluster.c, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
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
	podSecurityEnforced(t, name)
	return name
}

// podSecurityEnforced checks that a namespace refuses a pod that Pod
// Security "restricted" forbids (root allowed, privilege escalation,
// every capability, no seccomp profile): its label is enforced, not only
// set. The pod is sent as a dry run, so nothing is created if it is not.
func podSecurityEnforced(t *testing.T, ns string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrestricted"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: bases + "/runtime-python"}}}}
	err := cluster.c.Create(context.Background(), pod, client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("namespace %s took a pod that Pod Security restricted forbids: %v", ns, err)
	}
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
	out, err := runSless(args...)
	if err != nil {
		t.Fatalf("sless %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runSless runs the sless CLI on the cluster, returning its output (stdout
// and stderr) and how it ended.
func runSless(args ...string) (string, error) {
	cmd := exec.Command(slessBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "SLESS_REGISTRY="+registry, "SLESS_BASE_REGISTRY="+bases)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// answer is a function's answer through the activator.
type answer struct {
	code   int
	header http.Header
	body   string
	// took is the call's time, from the request to the answer's end.
	took time.Duration
}

// invoke calls a function through the activator once.
func invoke(ns, name, rest string) (answer, error) {
	start := time.Now()
	resp, err := httpClient.Get(cluster.activator + "/fn/" + ns + "/" + name + rest)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: string(body), took: time.Since(start)}, err
}

// invokeKnown calls a function through the activator, asking again only
// while the activators do not know it yet (their 404 "unknown function": a
// Function just applied reaches them through their watch). Any other
// answer is returned as the first one given, for the test to judge: a
// retry on the function's own answers would hide its failures. A call
// without an answer is an error at once.
func invokeKnown(ns, name, rest string) (answer, error) {
	var a answer
	var err error
	known := eventually.Holds(within, func() bool {
		a, err = invoke(ns, name, rest)
		return err != nil || !unknownFunction(a)
	})
	if err != nil {
		return a, fmt.Errorf("invoke %s/%s%s: %w", ns, name, rest, err)
	}
	if !known {
		return a, fmt.Errorf("the activators did not know %s/%s within %s", ns, name, within)
	}
	return a, nil
}

// mustInvokeKnown is invokeKnown failing the test on an error; from the
// test's goroutine only.
func mustInvokeKnown(t *testing.T, ns, name, rest string) answer {
	t.Helper()
	a, err := invokeKnown(ns, name, rest)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// unknownFunction tells the activator's own 404 for a function it does
// not know from any other 404, such as the function's.
func unknownFunction(a answer) bool {
	var e struct{ Error, Path string }
	return a.code == http.StatusNotFound && json.Unmarshal([]byte(a.body), &e) == nil && e.Error == activator.UnknownFunction && e.Path != ""
}

// httpClient bounds every call: a function at zero starts in seconds, and
// no test waits on a hung connection. Each request has a connection of its
// own: net/http sends a request again when a kept-alive connection closes
// before its answer, and a test must see every failure.
var httpClient = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}

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

// addEnv adds a variable to a Function's spec, which rolls its instances
// out with a new template.
func addEnv(t *testing.T, ns, name string, v corev1.EnvVar) {
	t.Helper()
	fn := function(t, ns, name)
	patch := client.MergeFrom(fn.DeepCopy())
	fn.Spec.Env = append(fn.Spec.Env, v)
	if err := cluster.c.Patch(context.Background(), fn, patch); err != nil {
		t.Fatal(err)
	}
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
