package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
)

// The FunctionRun CRD in a real kube-apiserver: its defaults, a body of
// any JSON value, its immutability, and the table kubectl prints.
func TestFunctionRunAPI(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg, apiextensionsv1.AddToScheme)
	ctx := context.Background()

	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, types.NamespacedName{Name: "functionruns.sless.dev"}, &crd); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(crd.Spec.Names.ShortNames, "fnrun") || !slices.Contains(crd.Spec.Names.Categories, "sless") {
		t.Errorf("names %+v, want short name fnrun in category sless", crd.Spec.Names)
	}

	for i, body := range []string{`"some text"`, `{"order": 1, "items": ["a"]}`, `[1, 2]`, `42`} {
		r := &v1alpha1.FunctionRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("body-%d", i), Namespace: "default"},
			Spec: v1alpha1.FunctionRunSpec{Function: "hello", Body: &apiextensionsv1.JSON{Raw: []byte(body)}}}
		defaulted := r.DeepCopy()
		defaulted.Default()
		if errs := v1alpha1.ValidateFunctionRun(defaulted); len(errs) != 0 {
			t.Errorf("body %s: %v", body, errs)
		}
		if err := c.Create(ctx, r); err != nil {
			t.Fatalf("create with body %s: %v", body, err)
		}
		var sent, kept any
		_ = json.Unmarshal([]byte(body), &sent)
		if err := json.Unmarshal(r.Spec.Body.Raw, &kept); err != nil || !reflect.DeepEqual(sent, kept) ||
			r.Spec.Method != "POST" || r.Spec.Path != "/" {
			t.Errorf("created: method %q path %q body %s; want POST / and the body", r.Spec.Method, r.Spec.Path, r.Spec.Body.Raw)
		}
	}

	r := &v1alpha1.FunctionRun{ObjectMeta: metav1.ObjectMeta{Name: "printed", Namespace: "default"},
		Spec: v1alpha1.FunctionRunSpec{Function: "hello", Path: "/orders?id=1", Headers: map[string]string{"X-Tag": "a"}}}
	if err := c.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	changed := r.DeepCopy()
	changed.Spec.Path = "/other"
	if err := c.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "a FunctionRun is immutable") {
		t.Errorf("a change of the spec: %v, want refused as immutable", err)
	}
	changed = r.DeepCopy()
	changed.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
	if err := c.Update(ctx, changed); err == nil {
		t.Error("a ttl added after creation was taken")
	}
	r.Status = v1alpha1.FunctionRunStatus{Phase: v1alpha1.FunctionRunRunning, Attempts: 2, RunID: "ABC"}
	if err := c.Status().Update(ctx, r); err != nil {
		t.Fatalf("update status: %v", err)
	}
	table := getTable(t, cfg, "/apis/sless.dev/v1alpha1/namespaces/default/functionruns/printed")
	var cols []string
	for _, col := range table.ColumnDefinitions {
		cols = append(cols, col.Name)
	}
	if want := []string{"Name", "Function", "Phase", "Attempts", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns = %v, want %v", cols, want)
	}
	if got := fmt.Sprint(table.Rows[0].Cells[:4]); got != "[printed hello Running 2]" {
		t.Errorf("row = %s, want [printed hello Running 2]", got)
	}

	// What the API server refuses, sless dev's validation refuses too.
	for name, spec := range map[string]v1alpha1.FunctionRunSpec{
		"no-function":   {},
		"long-function": {Function: strings.Repeat("f", 64)},
		"bad-method":    {Function: "hello", Method: "get"},
		"bad-path":      {Function: "hello", Path: "orders"},
		"bad-ttl":       {Function: "hello", TTLSecondsAfterFinished: ptr.To[int32](-1)},
	} {
		bad := &v1alpha1.FunctionRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
		bad.Default()
		if errs := v1alpha1.ValidateFunctionRun(bad); len(errs) == 0 {
			t.Errorf("%s: %+v valid, want refused", name, spec)
		}
		if err := c.Create(ctx, bad); err == nil {
			t.Errorf("%s: created %+v, want refused", name, spec)
		}
	}
}
