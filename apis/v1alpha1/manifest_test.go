package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const sampleManifest = `# two functions and a stranger
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hello}
spec:
  runtime: go
  source: ./hello
---
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
--- # a comment after the separator
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: orders, namespace: shop}
spec:
  runtime: python
  source: ./orders
  scale: {min: 1, max: 4, window: 30s}
  triggers:
    - {name: orders, rabbitmq: {queue: orders, maxRetries: 0}}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: typo}
spec:
  runtime: node
  scale: {mx: 3}
`

func TestDecodeManifest(t *testing.T) {
	fns, err := DecodeManifest([]byte(sampleManifest))
	if len(fns) != 2 || fns[0].Name != "hello" || fns[1].Name != "orders" {
		t.Fatalf("decoded %d functions %v, want hello and orders", len(fns), fns)
	}
	orders := fns[1]
	if orders.Namespace != "shop" || orders.Spec.Scale.Window.Duration != 30*time.Second ||
		*orders.Spec.Triggers[0].RabbitMQ.MaxRetries != 0 {
		t.Errorf("orders decoded wrong: %+v", orders.Spec)
	}

	var docErrs []*DocumentError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var de *DocumentError
		if !errors.As(e, &de) {
			t.Fatalf("error %v is not a *DocumentError", e)
		}
		docErrs = append(docErrs, de)
	}
	if len(docErrs) != 2 {
		t.Fatalf("got errors %v, want two", err)
	}
	if docErrs[0].Line != 10 || !strings.Contains(docErrs[0].Error(), `kind "ConfigMap" is not a sless.dev/v1alpha1 Function`) {
		t.Errorf("first error = %v, want the ConfigMap at line 10", docErrs[0])
	}
	if docErrs[1].Line != 24 || !strings.Contains(docErrs[1].Error(), `unknown field "spec.scale.mx"`) {
		t.Errorf("second error = %v, want the unknown field at line 24", docErrs[1])
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	tests := []struct {
		name, manifest, want string
	}{
		{"not yaml", "a: [1", "did not find expected"},
		{"scalar", "just words", "not a Kubernetes object"},
		{"duplicate field", "apiVersion: sless.dev/v1alpha1\nkind: Function\nspec: {runtime: go, runtime: node}\n", "already set"},
		{"wrong version", "apiVersion: sless.dev/v1\nkind: Function\n", `apiVersion "sless.dev/v1"`},
		{"wrong type", "apiVersion: sless.dev/v1alpha1\nkind: Function\nspec: {concurrency: many}\n", "spec.concurrency"},
		{"bad duration", "apiVersion: sless.dev/v1alpha1\nkind: Function\nspec: {scale: {window: soon}}\n", "invalid duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fns, err := DecodeManifest([]byte(tt.manifest))
			if len(fns) != 0 || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeManifest() = %v, %v; want no functions and an error containing %q", fns, err, tt.want)
			}
		})
	}
}

func TestDecodeManifestEmpty(t *testing.T) {
	for _, m := range []string{"", "\n", "# only a comment\n", "---\n---\n"} {
		if fns, err := DecodeManifest([]byte(m)); len(fns) != 0 || err != nil {
			t.Errorf("DecodeManifest(%q) = %v, %v; want nothing", m, fns, err)
		}
	}
}

// FuzzDecodeManifest feeds arbitrary bytes through the path a manifest takes
// in the local platform (decode, default, validate) and requires that it
// never panics and that whatever decodes can be defaulted and validated.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(sampleManifest))
	f.Add([]byte("apiVersion: sless.dev/v1alpha1\nkind: Function\nspec: {triggers: [{name: a, cron: {schedule: '@every 1s', timezone: x}}]}\n"))
	f.Add([]byte("apiVersion: sless.dev/v1alpha1\nkind: Function\nspec: {scale: {initial: -1, window: 1h1s}, env: [{name: A, valueFrom: {}}]}\n"))
	f.Add([]byte("--- \n---\t\n...\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fns, _ := DecodeManifest(data)
		for i := range fns {
			fns[i].Default()
			Validate(&fns[i], ModeLocal)
			Validate(&fns[i], ModeKubernetes)
		}
	})
}
