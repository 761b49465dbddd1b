//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
)

// failFast is how soon a function whose instances cannot start must say so:
// well under its timeoutSeconds (300), which callers used to wait out.
const failFast = 90 * time.Second

// invokeTimed calls a function and returns how long the answer took. A
// function just applied is not known to the activators until their watch
// brings it: a 404 then is asked again.
func invokeTimed(t *testing.T, ns, name string) (*http.Response, string, time.Duration) {
	t.Helper()
	var (
		resp *http.Response
		body []byte
		took time.Duration
	)
	waitFor(t, "the activators to know "+ns+"/"+name, func() bool {
		start := time.Now()
		var err error
		if resp, err = httpClient.Get(cluster.activator + "/fn/" + ns + "/" + name); err != nil {
			t.Fatalf("invoke %s/%s: %v", ns, name, err)
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		took = time.Since(start)
		return resp.StatusCode != http.StatusNotFound
	})
	return resp, string(body), took
}

// A function whose image does not exist answers 503 with the cause and a
// Retry-After, soon, not after its timeout; its state says crashing.
func TestImageThatDoesNotExist(t *testing.T) {
	ns := namespace(t, "e2e-noimage")
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: registry + "/e2e/does-not-exist:1",
			Scale: v1alpha1.Scale{Initial: ptr.To(int32(0))}}}
	if err := cluster.c.Create(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	resp, body, took := invokeTimed(t, ns, "ghost")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, "does-not-exist") || !strings.Contains(body, "cannot be pulled") {
		t.Errorf("a function whose image does not exist: %s (Retry-After %q) %s", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	if took > failFast {
		t.Errorf("the answer took %s", took)
	}
	// Asked again, it answers at once.
	if resp, _, took := invokeTimed(t, ns, "ghost"); resp.StatusCode != http.StatusServiceUnavailable || took > 10*time.Second {
		t.Errorf("asked again: %s after %s, want 503 at once", resp.Status, took)
	}
}

// A function that crashes as it starts answers 503 quoting its output.
func TestCrashOnStart(t *testing.T) {
	ns := namespace(t, "e2e-crash")
	src := filepath.Join(t.TempDir(), "crash")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "index.js"), []byte("throw new Error('boom at start');\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(src), "crash.yaml")
	manifest := "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: crash}\nspec: {runtime: node, source: ./crash, handler: index.handle, scale: {initial: 0}}\n"
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sless(t, "deploy", "-f", file, "-n", ns)
	resp, body, took := invokeTimed(t, ns, "crash")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "boom at start") || !strings.Contains(body, "crashed") {
		t.Errorf("a function that crashes at start: %s %s, want 503 with its output", resp.Status, body)
	}
	if took > failFast {
		t.Errorf("the answer took %s", took)
	}
}

// The admin API on the cluster is guarded from the start: a pod without
// the token is refused; the generated token, read from its Secret, opens it.
func TestAdminGuarded(t *testing.T) {
	ns := namespace(t, "e2e-admin")
	var list corev1.PodList
	if err := cluster.c.List(context.Background(), &list, client.InNamespace("sless-system"),
		client.MatchingLabels{"app.kubernetes.io/name": "sless-activator"}); err != nil || len(list.Items) == 0 {
		t.Fatalf("activator pods: %v", err)
	}
	image := list.Items[0].Spec.Containers[0].Image
	// A pod of the sless image calling the admin API as the CLI does.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "cli", Image: image,
				Args: []string{"invoke", "e2e-admin/anything", "--admin", "http://sless-activator.sless-system.svc:9090"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	if err := cluster.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to end", func() bool {
		err := cluster.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)
		return err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed)
	})
	logs, _ := kubectl(t, "-n", ns, "logs", "intruder")
	if pod.Status.Phase != corev1.PodFailed || !strings.Contains(logs, "needs a token") {
		t.Errorf("a pod without the token: %s, output %q; want refused", pod.Status.Phase, logs)
	}

	token := adminToken(t)
	if len(token) < 32 {
		t.Fatalf("the generated token is %d characters long", len(token))
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {token, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, cluster.admin+"/v1/functions", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		var code int
		eventually.TrueWithin(t, within, "the admin API's answer", func() bool {
			resp, err := httpClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			code = resp.StatusCode
			return true
		})
		if code != tc.want {
			t.Errorf("GET /v1/functions with token %q: %d, want %d", tc.token[:min(len(tc.token), 4)], code, tc.want)
		}
	}
}
