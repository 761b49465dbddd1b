package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
)

// TestAPIServer runs the Function CRD in a real kube-apiserver: what it
// accepts, how it defaults, what it refuses, and what kubectl is served.
func TestAPIServer(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg, apiextensionsv1.AddToScheme, kedav1alpha1.AddToScheme)
	t.Run("defaults match Go defaulting", func(t *testing.T) { testDefaults(t, c) })
	t.Run("invalid functions are refused", func(t *testing.T) { testRejects(t, c) })
	t.Run("the scale bounds are Go's", func(t *testing.T) { testScaleBounds(t, c) })
	t.Run("printer columns and short name", func(t *testing.T) { testPrinting(t, c, cfg) })
	t.Run("replicas at zero are printed", func(t *testing.T) { testPrintingZero(t, c, cfg) })
	t.Run("security context", func(t *testing.T) { testSecurityContext(t, c) })
	t.Run("KEDA CRDs are installed", func(t *testing.T) { testKEDA(t, c) })
	t.Run("the run targets in docs/runs.md", func(t *testing.T) { testDocsRunTargets(t, c) })
}

// The spec.async samples of docs/runs.md (chains, to a queue) are
// accepted as written, and say what they show.
func testDocsRunTargets(t *testing.T, c client.Client) {
	doc, err := os.ReadFile("../../docs/runs.md")
	if err != nil {
		t.Fatal(err)
	}
	var samples []string
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		if sample, _, _ := strings.Cut(block, "```"); strings.HasPrefix(sample, "spec:\n  async:") {
			samples = append(samples, sample)
		}
	}
	if len(samples) != 2 {
		t.Fatalf("%d spec.async samples in docs/runs.md, want the chain's and the queue's", len(samples))
	}
	want := []v1alpha1.RunTarget{{Function: "resize"}, {Queue: "thumbnails.done"}}
	for i, sample := range samples {
		fn := &v1alpha1.Function{}
		if err := yaml.UnmarshalStrict([]byte(sample), fn); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		fn.Name, fn.Namespace = fmt.Sprintf("docs-runs-%d", i), "default"
		fn.Spec.Runtime, fn.Spec.Image = v1alpha1.RuntimeGo, "registry.example/docs:1"
		if err := c.Create(context.Background(), fn); err != nil {
			t.Errorf("sample %d refused: %v\n%s", i, err, sample)
		}
		a := fn.Spec.Async
		if a.OnSuccess == nil || *a.OnSuccess != want[i] || a.OnFailure == nil || *a.OnFailure != (v1alpha1.RunTarget{Function: "alert"}) {
			t.Errorf("sample %d: onSuccess %+v, onFailure %+v; want %+v and the Function alert", i, a.OnSuccess, a.OnFailure, want[i])
		}
	}
}

func testDefaults(t *testing.T, c client.Client) {
	ctx := context.Background()
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{
			Runtime:  v1alpha1.RuntimeGo,
			Image:    "registry.example/minimal:1",
			Triggers: []v1alpha1.Trigger{{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "@hourly"}}, {Name: "jobs", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "jobs", ConnectionSecret: "amqp"}}},
		},
	}
	want := fn.DeepCopy()
	want.Default()
	if err := c.Create(ctx, fn); err != nil {
		t.Fatalf("create minimal Function: %v", err)
	}
	var got v1alpha1.Function
	if err := c.Get(ctx, client.ObjectKeyFromObject(fn), &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("API server defaults differ from Default():\nserver: %s\nGo:     %s", toJSON(t, got.Spec), toJSON(t, want.Spec))
	}
	if errs := v1alpha1.Validate(&got, v1alpha1.ModeKubernetes); len(errs) != 0 {
		t.Errorf("the server's defaulted Function fails Validate: %v", errs)
	}

	// With no triggers at all, the Function gets one HTTP trigger.
	bare := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"},
		Spec:       v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeNode, Image: "x"},
	}
	if err := c.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	if ts := bare.Spec.Triggers; len(ts) != 1 || ts[0].Name != v1alpha1.DefaultTriggerName || ts[0].HTTP == nil {
		t.Errorf("triggers defaulted to %+v, want one http trigger", ts)
	}
}

func testRejects(t *testing.T, c client.Client) {
	tests := []struct {
		name string
		spec string // YAML of spec, so that values Go types cannot hold can be sent
		want []string
	}{
		{"handler without a runtime", `{image: x, handler: Handle}`, []string{`spec.handler`, `only a runtime loads a handler`}},
		{"command with a runtime", `{runtime: go, image: x, command: [./server]}`, []string{`spec.command`, `command is for a Function without a runtime`}},
		{"command too long", `{image: x, command: [` + strings.Repeat("x,", 64) + `x]}`, []string{`spec.command: Too many: 65`}},
		{"unknown runtime", `{runtime: ruby, image: x}`, []string{`spec.runtime: Unsupported value: "ruby"`}},
		{"negative timeout", `{runtime: go, timeoutSeconds: -5}`, []string{`spec.timeoutSeconds: Invalid value: -5`}},
		{"negative concurrency", `{runtime: go, concurrency: -1}`, []string{`spec.concurrency: Invalid value: -1`}},
		{"min above max", `{runtime: go, scale: {min: 5, max: 2}}`, []string{`spec.scale.min: Invalid value`, `min must not exceed max`}},
		{"min above default max", `{runtime: go, scale: {min: 11}}`, []string{`spec.scale.min: Invalid value`, `min must not exceed max`}},
		{"initial above max", `{runtime: go, scale: {max: 3, initial: 4}}`, []string{`spec.scale.initial: Invalid value`, `initial must lie within [min, max]`}},
		{"initial below min", `{runtime: go, scale: {min: 2, initial: 1}}`, []string{`spec.scale.initial: Invalid value`}},
		{"max above the bound", fmt.Sprintf(`{runtime: go, scale: {max: %d}}`, v1alpha1.MaxScale+1), []string{`spec.scale.max: Invalid value`}},
		{"min above the bound", fmt.Sprintf(`{runtime: go, scale: {min: %d, max: %[1]d}}`, v1alpha1.MaxScale+1), []string{`spec.scale.min: Invalid value`}},
		{"bad owner", `{runtime: go, scale: {owner: hpa}}`, []string{`spec.scale.owner: Unsupported value: "hpa"`}},
		{"bad metric", `{runtime: go, scale: {metric: cpu}}`, []string{`spec.scale.metric: Unsupported value: "cpu"`}},
		{"window too short", `{runtime: go, scale: {window: 1s}}`, []string{`spec.scale.window: Invalid value`, `window must be between 6s and 1h`}},
		{"window not a duration", `{runtime: go, scale: {window: soon}}`, []string{`spec.scale.window: Invalid value: "soon"`}},
		{"async backoffs crossed", `{runtime: go, async: {minBackoff: 1m, maxBackoff: 1s}}`,
			[]string{`spec.async.minBackoff: Invalid value`, `minBackoff must not exceed maxBackoff`}},
		{"async maxAge too long", `{runtime: go, async: {maxAge: 48h}}`, []string{`spec.async.maxAge: Invalid value`, `maxAge must be between 1s and 24h`}},
		{"async attempts", `{runtime: go, async: {maxAttempts: 101}}`, []string{`spec.async.maxAttempts: Invalid value`}},
		{"onSuccess not a name", `{runtime: go, async: {onSuccess: {function: Next}}}`, []string{`spec.async.onSuccess.function: Invalid value: "Next"`}},
		{"onFailure to nowhere", `{runtime: go, async: {onFailure: {}}}`, []string{`spec.async.onFailure: Invalid value`, `exactly one of function or queue must be set`}},
		{"onFailure to two", `{runtime: go, async: {onFailure: {function: next, queue: failed}}}`, []string{`spec.async.onFailure: Invalid value`, `exactly one of function or queue`}},
		{"onSuccess to a reserved queue", `{runtime: go, async: {onSuccess: {queue: amq.results}}}`, []string{`spec.async.onSuccess.queue: Invalid value`, `reserved by RabbitMQ`}},
		{"two trigger kinds", `{runtime: go, triggers: [{name: a, http: {}, cron: {schedule: "@hourly"}}]}`,
			[]string{`spec.triggers[0]: Invalid value`, `exactly one of http, cron or rabbitmq must be set`}},
		{"no trigger kind", `{runtime: go, triggers: [{name: a}]}`, []string{`spec.triggers[0]: Invalid value`, `exactly one of`}},
		{"duplicate trigger names", `{runtime: go, triggers: [{name: a, http: {}}, {name: a, cron: {schedule: "@hourly"}}]}`,
			[]string{`spec.triggers[1]: Duplicate value`}},
		{"bad trigger name", `{runtime: go, triggers: [{name: Web, http: {}}]}`, []string{`spec.triggers[0].name: Invalid value: "Web"`}},
		{"rabbitmq without queue", `{runtime: go, triggers: [{name: q, rabbitmq: {}}]}`, []string{`spec.triggers[0].rabbitmq.queue: Required value`}},
		{"unknown field", `{runtime: go, replicas: 3}`, []string{`unknown field "spec.replicas"`}},
		{"root without runAsNonRoot false", `{runtime: go, image: x, securityContext: {runAsUser: 0}}`,
			[]string{`spec.securityContext.runAsUser: Invalid value`, `runAsUser 0 is root: set runAsNonRoot false too`}},
		{"max duration below the timeout", `{runtime: go, timeoutSeconds: 60, maxDurationSeconds: 30}`,
			[]string{`spec.maxDurationSeconds: Invalid value`, `maxDurationSeconds must be timeoutSeconds at least`}},
		{"bad protocol", `{runtime: go, protocol: h3}`, []string{`spec.protocol: Unsupported value: "h3"`}},
		{"privileged without escalation", `{runtime: go, image: x, securityContext: {privileged: true}}`,
			[]string{`spec.securityContext.privileged: Invalid value`, `privileged needs allowPrivilegeEscalation true`}},
	}
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			manifest := fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: bad-%d, namespace: default}\nspec: %s\n", i, tt.spec)
			if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
				t.Fatal(err)
			}
			err := c.Create(ctx, obj, client.FieldValidation(metav1.FieldValidationStrict))
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("create = %v, want the Function refused as invalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var fn v1alpha1.Function
			if c.Get(ctx, types.NamespacedName{Namespace: "default", Name: obj.GetName()}, &fn) == nil {
				t.Errorf("refused Function %s exists", obj.GetName())
			}
			assertGoRefuses(t, manifest, strings.SplitN(tt.want[0], ":", 2)[0])
		})
	}
}

// testScaleBounds: the CRD takes the largest scale Go's validation takes
// (testRejects: and refuses one more), so that the admin API, which checks
// a change with Go's, refuses what the API server would.
func testScaleBounds(t *testing.T, c client.Client) {
	top := int32(v1alpha1.MaxScale)
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "largest", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x",
			Scale: v1alpha1.Scale{Min: top, Max: top, Initial: &top}},
	}
	defaulted := fn.DeepCopy()
	defaulted.Default()
	if errs := v1alpha1.Validate(defaulted, v1alpha1.ModeKubernetes); len(errs) > 0 {
		t.Fatalf("Validate() = %v", errs)
	}
	if err := c.Create(context.Background(), fn); err != nil {
		t.Errorf("create with min, max and initial %d: %v", top, err)
	}
}

func testPrinting(t *testing.T, c client.Client, cfg *rest.Config) {
	ctx := context.Background()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, types.NamespacedName{Name: "functions.sless.dev"}, &crd); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(crd.Spec.Names.ShortNames, "fn") {
		t.Errorf("short names = %v, want fn", crd.Spec.Names.ShortNames)
	}

	// Give a Function a status through the status subresource, then ask
	// for the table kubectl get prints.
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "printed", Namespace: "default"},
		Spec:       v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimePython, Image: "x"},
	}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status = v1alpha1.FunctionStatus{
		URL: "http://activator/fn/default/printed", Replicas: 2, ReadyReplicas: 2, DesiredReplicas: 3,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}},
	}
	if err := c.Status().Update(ctx, fn); err != nil {
		t.Fatalf("update status: %v", err)
	}
	table := getTable(t, cfg, "/apis/sless.dev/v1alpha1/namespaces/default/functions/printed")
	var cols []string
	for _, col := range table.ColumnDefinitions {
		cols = append(cols, col.Name)
	}
	if want := []string{"Name", "Ready", "Replicas", "Desired", "URL", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns = %v, want %v", cols, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table has %d rows, want 1", len(table.Rows))
	}
	got := fmt.Sprint(table.Rows[0].Cells[:5])
	if want := "[printed True 2 3 http://activator/fn/default/printed]"; got != want {
		t.Errorf("row = %s, want %s", got, want)
	}
}

// testPrintingZero: a Function at zero shows 0 under REPLICAS and DESIRED,
// not nothing; also one whose status was written without the counts, as
// controllers before them did (omitempty): they read as 0.
func testPrintingZero(t *testing.T, c client.Client, cfg *rest.Config) {
	ctx := context.Background()
	ready := []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"},
		Spec:       v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x"},
	}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status = v1alpha1.FunctionStatus{Conditions: ready}
	if err := c.Status().Update(ctx, fn); err != nil {
		t.Fatalf("update status: %v", err)
	}
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Function"))
	old.SetNamespace("default")
	old.SetName("older")
	if err := unstructured.SetNestedField(old.Object, map[string]any{"runtime": "go", "image": "x"}, "spec"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	conditions, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ready[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(old.Object, []any{conditions}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(ctx, old); err != nil {
		t.Fatalf("update status without the counts: %v", err)
	}
	for _, name := range []string{"idle", "older"} {
		var got unstructured.Unstructured
		got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Function"))
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"replicas", "readyReplicas", "desiredReplicas"} {
			if v, found, err := unstructured.NestedInt64(got.Object, "status", f); !found || err != nil || v != 0 {
				t.Errorf("%s: status.%s = %v (found %v, %v), want 0", name, f, v, found, err)
			}
		}
		table := getTable(t, cfg, "/apis/sless.dev/v1alpha1/namespaces/default/functions/"+name)
		if len(table.Rows) != 1 {
			t.Fatalf("%s: table has %d rows, want 1", name, len(table.Rows))
		}
		if got, want := fmt.Sprint(table.Rows[0].Cells[:4]), "["+name+" True 0 0]"; got != want {
			t.Errorf("row = %s, want %s", got, want)
		}
	}
}

// testSecurityContext: the API server keeps a Function's securityContext
// as given, and no default is stored in it (the controller applies them).
func testSecurityContext(t *testing.T, c client.Client) {
	ctx := context.Background()
	root, nonRoot := int64(0), false
	fn := &v1alpha1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x",
			SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: &nonRoot}},
	}
	want := fn.Spec.SecurityContext.DeepCopy()
	if err := c.Create(ctx, fn); err != nil {
		t.Fatalf("create a Function that runs as root: %v", err)
	}
	var got v1alpha1.Function
	if err := c.Get(ctx, client.ObjectKeyFromObject(fn), &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec.SecurityContext, want) {
		t.Errorf("securityContext stored as %s, want %s", toJSON(t, got.Spec.SecurityContext), toJSON(t, want))
	}
	if errs := v1alpha1.Validate(&got, v1alpha1.ModeKubernetes); len(errs) != 0 {
		t.Errorf("Validate() = %v, want the API server's verdict: valid", errs)
	}
}

// assertGoRefuses checks that the local platform, which has no API server,
// refuses the manifest too: it does not decode, or Validate names the field.
func assertGoRefuses(t *testing.T, manifest, path string) {
	t.Helper()
	fns, err := v1alpha1.DecodeManifest([]byte(manifest))
	if err != nil {
		return
	}
	fns[0].Default()
	errs := v1alpha1.Validate(&fns[0], v1alpha1.ModeKubernetes)
	if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), path) {
		t.Errorf("Validate() = %v, want an error on %s as the API server gives", errs, path)
	}
}

// getTable asks the API server for the server-side printed table, as
// kubectl get does.
func getTable(t *testing.T, cfg *rest.Config, path string) metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatal(err)
	}
	return table
}

func testKEDA(t *testing.T, c client.Client) {
	ctx := context.Background()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: "default"}}
	so := &kedav1alpha1.ScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: "default"},
		Spec: kedav1alpha1.ScaledObjectSpec{
			ScaleTargetRef: &kedav1alpha1.ScaleTarget{Name: dep.Name},
			Triggers: []kedav1alpha1.ScaleTriggers{{
				Type:     "external-push",
				Metadata: map[string]string{"scalerAddress": "sless-autoscaler.sless-system:9095", "function": "default/scaled"},
			}},
		},
	}
	if err := c.Create(ctx, so); err != nil {
		t.Fatalf("create ScaledObject: %v", err)
	}
	var got kedav1alpha1.ScaledObject
	if err := c.Get(ctx, client.ObjectKeyFromObject(so), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Triggers) != 1 || got.Spec.Triggers[0].Metadata["function"] != "default/scaled" {
		t.Errorf("ScaledObject came back as %+v", got.Spec)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
