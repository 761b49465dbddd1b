//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sampleCalls is a call of each sample and stress function and what its
// answer holds. The PostgreSQL ones find no server at their PGHOST
// (127.0.0.1 is the pod's own loopback): by the samples' README they answer
// 500 naming it.
var sampleCalls = []struct {
	name, rest string
	code       int
	want       string
	cookies    []string // the Set-Cookie fields, in order
}{
	{"hello-go", "?name=e2e", 200, "e2e", nil},
	{"hello-python", "?name=e2e", 200, "e2e", nil},
	{"hello-node", "?name=e2e", 200, "e2e", nil},
	{"http-go", "/orders/8", 404, "no order 8", []string{"a=1; Path=/", "b=2; Path=/"}},
	{"http-python", "/orders/8", 404, "no order 8", []string{"a=1; Path=/", "b=2; Path=/"}},
	{"http-node", "/orders/8", 404, "no order 8", []string{"a=1; Path=/", "b=2; Path=/"}},
	{"http-go", "/pixel.png", 200, "\x89PNG", nil},
	{"http-python", "/pixel.png", 200, "\x89PNG", nil},
	{"http-node", "/pixel.png", 200, "\x89PNG", nil},
	{"http-go", "/events?n=2&every=10ms", 200, "data: 0\n\ndata: 1\n\n", nil},
	{"http-python", "/events?n=2&every=10ms", 200, "data: 0\n\ndata: 1\n\n", nil},
	{"http-node", "/events?n=2&every=10ms", 200, "data: 0\n\ndata: 1\n\n", nil},
	{"stress-slow", "?seconds=0", 200, "slept", nil},
	{"stress-bigloop", "?n=1000", 200, "1000", nil},
	{"stress-divzero", "?n=6&d=3", 200, `"result"`, nil},
	{"stress-go-fast", "?n=10", 200, `"fibonacci":"55"`, nil},
	{"stress-go-nil", "", 200, "greeting", nil},
	{"stress-js-badenv", "", 200, "hello from the manifest", nil},
	{"stress-crash", "", 200, "ok", nil},
	{"stress-writer", "?rows=1", 500, "127.0.0.1", nil},
	{"stress-js-async", "", 500, "127.0.0.1", nil},
	{"stress-go-pgstorm", "?workers=1&seconds=1", 500, "127.0.0.1", nil},
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
			a, err := invokeKnown(ns, c.name, c.rest)
			if err != nil || a.code != c.code || !strings.Contains(a.body, c.want) || !slices.Equal(a.header.Values("Set-Cookie"), c.cookies) {
				t.Errorf("%s%s: %d %q %v, cookies %q; want %d with %q, cookies %q", c.name, c.rest, a.code, a.body, err,
					a.header.Values("Set-Cookie"), c.code, c.want, c.cookies)
			}
		})
	}
	wg.Wait()
	for _, name := range []string{"http-go", "http-python", "http-node"} {
		wg.Go(func() { checkStreamed(t, ns, name) })
	}
	wg.Wait()
}

// checkStreamed calls a sample's event stream of two events 3 s apart and
// checks the first arrives while the function still works on the second,
// through both hops: seconds before the answer ends, whenever the instance
// started.
func checkStreamed(t *testing.T, ns, name string) {
	resp, err := httpClient.Get(cluster.activator + "/fn/" + ns + "/" + name + "/events?n=2&every=3s")
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	firstAt := time.Now()
	if err != nil || first != "data: 0\n" {
		t.Errorf("%s: first line %q, %v", name, first, err)
		return
	}
	rest, err := io.ReadAll(r)
	if gap := time.Since(firstAt); err != nil || string(rest) != "\ndata: 1\n\n" || gap < 2*time.Second {
		t.Errorf("%s: the rest %q (%v) came %s after the first event, want the second event about 3 s later", name, rest, err, gap)
	}
}

// kubectl shows a Function's real counts, the Deployment's own, at one
// instance and at zero; deleting it leaves nothing: the garbage collector
// removes its Deployment, Service and pods.
func TestKubectl(t *testing.T) {
	ns := namespace(t, "e2e-kubectl")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "hello-go", "go", "hello-go", "Handle",
		"  scale: {initial: 1, window: 6s, scaleToZeroGracePeriod: 0s}\n"))
	if a := mustInvokeKnown(t, ns, "hello-go", ""); a.code != 200 {
		t.Fatalf("hello-go: %d %s", a.code, a.body)
	}
	for _, replicas := range []int32{1, 0} { // idle, it scales to zero
		waitFor(t, fmt.Sprintf("kubectl get fn to show hello-go ready with the Deployment's %d replicas", replicas), func() bool {
			var d appsv1.Deployment
			if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "hello-go"}, &d); err != nil ||
				d.Spec.Replicas == nil || *d.Spec.Replicas != replicas || d.Status.Replicas != replicas || d.Status.ReadyReplicas != replicas {
				return false
			}
			out, err := kubectl(t, "-n", ns, "get", "fn", "hello-go", "--no-headers")
			row, want := strings.Join(strings.Fields(out), " "), fmt.Sprintf("hello-go True %d %d ", d.Status.Replicas, *d.Spec.Replicas)
			return err == nil && strings.HasPrefix(row+" ", want)
		})
	}
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
