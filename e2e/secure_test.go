//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
)

// runtimes are the function runtimes, each with a function whose source,
// one file, fails as it loads in a pod, printing "boom at start" (only
// there: sless deploy refuses a Python or Node handler that does not load
// on the machine, before anything reaches the cluster), and one that fails
// everywhere (Go's is the same: its build runs nothing).
var runtimes = []struct {
	runtime                        v1alpha1.Runtime
	file, handler, crash, crashNow string
}{
	{v1alpha1.RuntimeGo, "crash.go", "Handle", goCrash, goCrash},
	{v1alpha1.RuntimePython, "main.py", "main.handle",
		"import os\n\nif os.environ.get('KUBERNETES_SERVICE_HOST'):\n    raise RuntimeError('boom at start')\n\ndef handle(event):\n    return 'never'\n",
		"raise RuntimeError('boom at start')\n\ndef handle(event):\n    return 'never'\n"},
	{v1alpha1.RuntimeNode, "index.js", "index.handle",
		"if (process.env.KUBERNETES_SERVICE_HOST) throw new Error('boom at start');\nexports.handle = () => 'never';\n",
		"throw new Error('boom at start');\n"},
}

const goCrash = `package crash

import (
	"context"
	"os"

	"sless.dev/sless/runtimes/go/sless"
)

func init() {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		panic("boom at start")
	}
}

func Handle(context.Context, sless.Event) (any, error) { return nil, nil }
`

// failsFast checks that a function whose instances cannot start answered
// 503 with its cause and a Retry-After, well before its timeoutSeconds
// (which callers used to wait out): within half of it.
func failsFast(t *testing.T, fn *v1alpha1.Function, a answer, cause ...string) {
	t.Helper()
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("%s (%s): %d (Retry-After %q) %s, want 503 with a Retry-After", fn.Name, fn.Spec.Runtime, a.code, a.header.Get("Retry-After"), a.body)
	}
	for _, c := range cause {
		if !strings.Contains(a.body, c) {
			t.Errorf("%s (%s): %s, want the cause with %q", fn.Name, fn.Spec.Runtime, a.body, c)
		}
	}
	if timeout := time.Duration(fn.Spec.TimeoutSeconds) * time.Second; a.took > timeout/2 {
		t.Errorf("%s (%s): the answer took %s, its timeout is %s", fn.Name, fn.Spec.Runtime, a.took, timeout)
	}
}

// A function whose image does not exist answers 503 with the cause, soon,
// not after its timeout, in every runtime; asked again, at once.
func TestImageThatDoesNotExist(t *testing.T) {
	ns := namespace(t, "e2e-noimage")
	for _, r := range runtimes {
		t.Run(string(r.runtime), func(t *testing.T) {
			t.Parallel()
			name := "ghost-" + string(r.runtime)
			image := registry + "/e2e/does-not-exist-" + string(r.runtime) + ":1"
			fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: v1alpha1.FunctionSpec{Runtime: r.runtime, Image: image, Handler: r.handler,
					Scale: v1alpha1.Scale{Initial: ptr.To(int32(0))}}}
			if err := cluster.c.Create(context.Background(), fn); err != nil {
				t.Fatal(err)
			}
			fn = function(t, ns, name) // with its defaults
			failsFast(t, fn, mustInvokeKnown(t, ns, name, ""), "does-not-exist-"+string(r.runtime), "cannot be pulled")
			if a := mustInvokeKnown(t, ns, name, ""); a.code != http.StatusServiceUnavailable || a.took > 10*time.Second {
				t.Errorf("asked again: %d after %s, want 503 at once", a.code, a.took)
			}
		})
	}
}

// A function that crashes as it starts in its pod answers 503 quoting its
// output, in every runtime. One whose Python or Node handler does not load
// at all is refused by sless deploy, with the cause, and nothing is applied.
func TestCrashOnStart(t *testing.T) {
	ns := namespace(t, "e2e-crash")
	file := crashManifest(t, func(r int) string { return runtimes[r].crashNow })
	out, err := runSless("deploy", "-f", file, "-n", ns)
	if err == nil || !strings.Contains(out, "2 functions failed, nothing applied") || strings.Count(out, "boom at start") < 2 {
		t.Errorf("sless deploy of handlers that do not load: %v\n%s\nwant it refused, quoting both causes", err, out)
	}
	var fns v1alpha1.FunctionList
	if err := cluster.c.List(context.Background(), &fns, client.InNamespace(ns)); err != nil || len(fns.Items) > 0 {
		t.Errorf("functions after the refused deploy: %d %v, want none", len(fns.Items), err)
	}

	sless(t, "deploy", "-f", crashManifest(t, func(r int) string { return runtimes[r].crash }), "-n", ns)
	for _, r := range runtimes {
		t.Run(string(r.runtime), func(t *testing.T) {
			t.Parallel()
			name := "crash-" + string(r.runtime)
			failsFast(t, function(t, ns, name), mustInvokeKnown(t, ns, name, ""), "boom at start", "crashed")
		})
	}
}

// crashManifest writes a function crash-RUNTIME for each runtime, its one
// file source(r) for runtimes[r], and returns their manifest.
func crashManifest(t *testing.T, source func(r int) string) string {
	t.Helper()
	dir := t.TempDir()
	var docs []string
	for i, r := range runtimes {
		name := "crash-" + string(r.runtime)
		src := filepath.Join(dir, name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, r.file), []byte(source(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: %s}\n"+
			"spec: {runtime: %s, source: ./%s, handler: %s, timeoutSeconds: 240, scale: {initial: 0}}\n", name, r.runtime, name, r.handler))
	}
	file := filepath.Join(dir, "crash.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// adminWrites are the admin API's writes, each on function fn: none may
// be done without the token.
func adminWrites(ns, fn string) []struct{ name, method, path, body string } {
	base := "/v1/namespaces/" + ns + "/functions/" + fn
	return []struct{ name, method, path, body string }{
		{"scale", http.MethodPatch, base + "/scale", `{"min": 2}`},
		{"trigger", http.MethodPatch, base + "/triggers/web", `{"enabled": false}`},
		{"invoke", http.MethodPost, base + "/invoke", `{}`},
	}
}

// The admin API on the cluster is guarded from the start: its writes, from
// a pod or from the machine, without the token or with a wrong one, are
// refused and change nothing; the generated token, read from its Secret,
// opens it.
func TestAdminGuarded(t *testing.T) {
	ns := namespace(t, "e2e-admin")
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "target"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: registry + "/e2e/target:1",
			Scale:    v1alpha1.Scale{Initial: ptr.To(int32(0)), Max: 3},
			Triggers: []v1alpha1.Trigger{{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}}}}}
	if err := cluster.c.Create(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	before := function(t, ns, "target")
	writes := adminWrites(ns, "target")

	// A pod of the sless image, each write by a container of its own:
	// sless load sends one request and prints its status as JSON.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}
	for _, w := range writes {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: w.name, Image: slessImage(t),
			Args: []string{"load", "http://sless-activator.sless-system.svc:9090" + w.path, "-X", w.method, "--body", w.body,
				"--requests", "1", "-c", "1", "--allow-remote", "-o", "json"},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}})
	}
	if err := cluster.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to end", func() bool {
		err := cluster.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)
		return err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed)
	})
	for _, w := range writes {
		logs, err := kubectl(t, "-n", ns, "logs", "intruder", "-c", w.name)
		if codes := loadCodes(logs); err != nil || len(codes) != 1 || codes[http.StatusUnauthorized] != 1 {
			t.Errorf("%s %s from a pod without the token: %v, want 401\n%s", w.method, w.path, err, logs)
		}
	}

	// From the machine, without the token and with a wrong one.
	token := adminToken(t)
	if len(token) < 32 {
		t.Fatalf("the generated token is %d characters long", len(token))
	}
	for _, w := range writes {
		for _, try := range []string{"", "wrong"} {
			if code := adminDo(t, w.method, w.path, w.body, try); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d, want 401", w.method, w.path, try, code)
			}
		}
	}
	if after := function(t, ns, "target"); after.Generation != before.Generation || !equality.Semantic.DeepEqual(after.Spec, before.Spec) {
		t.Errorf("refused writes changed the function: generation %d to %d, spec %+v to %+v", before.Generation, after.Generation, before.Spec, after.Spec)
	}
	if recs := records(t, ns, "target", ""); len(recs) != 0 {
		t.Errorf("refused invokes left %d invocations: %+v", len(recs), recs)
	}
	if code := adminDo(t, http.MethodGet, "/v1/functions", "", token); code != http.StatusOK {
		t.Errorf("GET /v1/functions with the token: %d, want 200", code)
	}
}

// slessImage is the image the activators run: sless, every subcommand.
func slessImage(t *testing.T) string {
	t.Helper()
	return activatorPods(t)[0].Spec.Containers[0].Image
}

// loadCodes reads the status codes of a sless load -o json run from its
// output (the JSON is its last line); nil when there is none.
func loadCodes(out string) map[int]int64 {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var run struct{ Result struct{ Codes map[int]int64 } }
	if json.Unmarshal([]byte(lines[len(lines)-1]), &run) != nil {
		return nil
	}
	return run.Result.Codes
}

// adminDo sends one request to the admin Service with token (none when
// empty) and returns the status.
func adminDo(t *testing.T, method, path, body, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, cluster.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
