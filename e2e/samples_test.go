//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/internal/eventually"
)

// sampleCalls is a call of each sample and stress function and what its
// answer holds. The PostgreSQL ones find no server at their PGHOST
// (127.0.0.1 is the pod's own loopback): by the samples' README they answer
// 500 naming it.
var sampleCalls = []struct {
	name, rest string
	code       int
	want       string
}{
	{"hello-go", "?name=e2e", 200, "e2e"},
	{"hello-python", "?name=e2e", 200, "e2e"},
	{"hello-node", "?name=e2e", 200, "e2e"},
	{"stress-slow", "?seconds=0", 200, "slept"},
	{"stress-bigloop", "?n=1000", 200, "1000"},
	{"stress-divzero", "?n=6&d=3", 200, `"result"`},
	{"stress-go-fast", "?n=10", 200, `"fibonacci":"55"`},
	{"stress-go-nil", "", 200, "greeting"},
	{"stress-js-badenv", "", 200, "hello from the manifest"},
	{"stress-crash", "", 200, "ok"},
	{"stress-writer", "?rows=1", 500, "127.0.0.1"},
	{"stress-js-async", "", 500, "127.0.0.1"},
	{"stress-go-pgstorm", "?workers=1&seconds=1", 500, "127.0.0.1"},
}

// Every sample and stress function, deployed from its manifest unchanged
// with `sless deploy`, answers through the activator, in a namespace that
// enforces Pod Security "restricted".
func TestSamples(t *testing.T) {
	ns := namespace(t, "e2e-samples")
	out := sless(t, "deploy", "-f", filepath.Join(root, "config/samples/functions"), "-n", ns)
	for _, c := range sampleCalls {
		if !strings.Contains(out, ns+"/"+c.name+"\t"+registry+"/"+ns+"/"+c.name+"@sha256:") {
			t.Errorf("sless deploy did not report %s by digest:\n%s", c.name, out)
		}
	}
	var wg sync.WaitGroup
	for _, c := range sampleCalls {
		wg.Go(func() {
			var code int
			var body string
			var err error
			if !eventually.Holds(within, func() bool {
				code, body, err = invoke(ns, c.name, c.rest)
				return err == nil && code == c.code && strings.Contains(body, c.want)
			}) {
				t.Errorf("%s%s: %d %q %v, want %d with %q", c.name, c.rest, code, body, err, c.code, c.want)
			}
		})
	}
	wg.Wait()
}

// kubectl shows a Function's real counts, and deleting it leaves nothing:
// the garbage collector removes its Deployment, Service and pods.
func TestKubectl(t *testing.T) {
	ns := namespace(t, "e2e-kubectl")
	sless(t, "deploy", "-f", filepath.Join(root, "config/samples/functions/hello.yaml"), "-n", ns)
	waitFor(t, "hello-go answering", func() bool {
		code, _, err := invoke(ns, "hello-go", "")
		return err == nil && code == 200
	})
	waitFor(t, "kubectl get fn to show hello-go ready, 1 of 1", func() bool {
		out, err := kubectl(t, "-n", ns, "get", "fn", "hello-go", "--no-headers")
		f := strings.Fields(out)
		return err == nil && len(f) >= 4 && f[0] == "hello-go" && f[1] == "True" && f[2] == "1" && f[3] == "1"
	})
	if out, err := kubectl(t, "-n", ns, "delete", "fn", "hello-go", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatalf("kubectl delete fn: %v\n%s", err, out)
	}
	waitFor(t, "nothing of hello-go left", func() bool {
		var d appsv1.Deployment
		var s corev1.Service
		dErr := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "hello-go"}, &d)
		sErr := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "hello-go"}, &s)
		return apierrors.IsNotFound(dErr) && apierrors.IsNotFound(sErr) && len(pods(t, ns, "hello-go")) == 0
	})
}
