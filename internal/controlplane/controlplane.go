// Package controlplane starts a real kube-apiserver and etcd for tests, with
// the sless and KEDA CRDs installed, through controller-runtime's envtest.
//
// The binaries are built from Go modules by `make controlplane` (see
// hack/tools), since release binaries cannot be downloaded everywhere the
// tests run. `make test` builds them and points KUBEBUILDER_ASSETS at them;
// a plain `go test` finds them under bin/k8s.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
)

// kedaModule is the module whose config/crd/bases holds KEDA's CRDs; its
// version is the one in go.mod, so tests and controller agree on the types.
const kedaModule = "github.com/kedacore/keda/v2"

// Start runs a control plane for the test and stops it when the test ends.
// Without the binaries it fails the test in CI (CI=true) and skips it
// elsewhere, saying how to build them.
func Start(t testing.TB) *rest.Config {
	t.Helper()
	env, err := Environment()
	if errors.Is(err, errNoBinaries) {
		needs.Missing(t, "the test control plane: %v (run `make controlplane` or `make test`)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start test control plane from %s: %v", env.BinaryAssetsDirectory, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop test control plane: %v", err)
		}
	})
	return cfg
}

// errNoBinaries: kube-apiserver and etcd are not built.
var errNoBinaries = errors.New("no control plane binaries")

// Environment is the control plane Start runs, with the sless and KEDA
// CRDs, for a program of its own (the scale benchmark) to start and stop.
func Environment() (*envtest.Environment, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoBinaries, err)
	}
	keda, err := moduleDir(root, kedaModule)
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(keda, "config", "crd", "bases"),
		},
		ErrorIfCRDPathMissing: true,
		// envtest's 20 s per start is too short on a busy machine: it
		// kills a kube-apiserver still starting and tries again, five
		// times, and fails the test. A slow start is not a failure.
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}, nil
}

// repoRoot is the directory of the main module, found from this file so
// that tests in any package agree on it.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the repository root")
	}
	return filepath.Join(filepath.Dir(file), "..", ".."), nil
}

// assetsDir is KUBEBUILDER_ASSETS when set, else the one version directory
// under bin/k8s that holds both binaries.
func assetsDir(root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, checkBinaries(dir)
	}
	matches, err := filepath.Glob(filepath.Join(root, "bin", "k8s", "*", "kube-apiserver"))
	if err != nil {
		return "", err
	}
	for _, m := range matches {
		if dir := filepath.Dir(m); checkBinaries(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no kube-apiserver and etcd under %s", filepath.Join(root, "bin", "k8s"))
}

func checkBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("missing %s: %w", name, err)
		}
	}
	return nil
}

func moduleDir(root, module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate module %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded (run go mod download)", module)
	}
	return dir, nil
}

// Client returns a controller-runtime client of the control plane that
// knows Kubernetes' own types, the sless types, and those added by adds.
func Client(t testing.TB, cfg *rest.Config, adds ...func(*kruntime.Scheme) error) client.Client {
	t.Helper()
	c, err := NewClient(cfg, adds...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewClient is Client for a program of its own.
func NewClient(cfg *rest.Config, adds ...func(*kruntime.Scheme) error) (client.Client, error) {
	scheme := kruntime.NewScheme()
	for _, add := range append([]func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme}, adds...) {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// CreateDeployment creates the Deployment default/name a Function's
// instances would run in, labelled as the controller labels it, with
// replicas: what the autoscaler reads and scales.
func CreateDeployment(t testing.TB, c client.Client, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{wire.FunctionLabel: name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "x"}}},
			},
		},
	}
	if err := c.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
}
