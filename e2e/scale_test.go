//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/controller"
)

// manifest writes a manifest of one Function whose source is a sample's,
// and returns its path.
func manifest(t *testing.T, name, runtime, sample, handler, extra string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".yaml")
	yaml := fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: %s}\nspec:\n  runtime: %s\n  source: %s\n  handler: %s\n%s",
		name, runtime, filepath.Join(root, "config/samples/functions", sample), handler, extra)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// readyPods counts a function's pods that are ready.
func readyPods(t *testing.T, ns, name string) int {
	n := 0
	for _, p := range pods(t, ns, name) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				n++
			}
		}
	}
	return n
}

// At zero, 300 concurrent requests all succeed while the first instance
// starts; under load the function scales out; idle, it returns to zero
// after its window and grace, its pods gone.
func TestFromZero(t *testing.T) {
	ns := namespace(t, "e2e-zero")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "slow", "python", "stress-slow", "main.handle",
		"  scale: {initial: 0, max: 4, target: 5, window: 10s, scaleToZeroGracePeriod: 5s}\n"))
	waitFor(t, "the function created at zero", func() bool {
		return function(t, ns, "slow").Status.ObservedGeneration > 0 && len(pods(t, ns, "slow")) == 0
	})

	var ok, failed atomic.Int64
	var first sync.Once
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			a, err := invoke(ns, "slow", "?seconds=0")
			if err == nil && a.code == 200 {
				ok.Add(1)
				return
			}
			failed.Add(1)
			first.Do(func() { t.Errorf("a request at zero: %d %q %v", a.code, a.body, err) })
		})
	}
	wg.Wait()
	if ok.Load() != 300 {
		t.Fatalf("%d of 300 requests at zero succeeded, %d failed", ok.Load(), failed.Load())
	}
	// The two activators each took part of them; whichever answers the
	// admin API counts all 300 (a view lives a second: the first may
	// predate the last records).
	type view struct{ Requests, ColdStarts int }
	stats := func() view {
		var fn struct{ Stats view }
		adminGet(t, "/v1/namespaces/"+ns+"/functions/slow", &fn)
		return fn.Stats
	}
	var seen view
	waitFor(t, "the admin view to count the 300 requests", func() bool { seen = stats(); return seen.Requests == 300 })
	for i := range 6 {
		if v := stats(); v != seen || v.ColdStarts == 0 {
			t.Errorf("admin view %d: %+v, want %+v as the first, with cold starts", i, v, seen)
		}
	}

	// 30 clients of 1 s requests: 30 in flight at a target of 5 is 6
	// instances, the max of 4. Load goes on until it has scaled out.
	ctx, stop := context.WithCancel(context.Background())
	var loadErrors atomic.Int64
	var firstLoadError sync.Once
	for range 30 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if a, err := invoke(ns, "slow", "?seconds=1"); err != nil || a.code != 200 {
					loadErrors.Add(1)
					firstLoadError.Do(func() { t.Errorf("a request under load: %d %q %v", a.code, a.body, err) })
				}
			}
		})
	}
	waitFor(t, "the function to scale out under load", func() bool { return readyPods(t, ns, "slow") >= 2 })
	stop()
	wg.Wait()
	if n := loadErrors.Load(); n > 0 {
		t.Errorf("%d requests failed under load", n)
	}
	waitFor(t, "the function back at zero, its pods gone", func() bool { return len(pods(t, ns, "slow")) == 0 })
}

// Every runtime's process ends of its own on SIGTERM when its pod goes at
// a scale-down: the function container exits 0, or 143 (the signal's
// default action), and is never killed by the kubelet at the end of the
// grace period (137). Before it honoured SIGTERM, a runtime waited out the
// pod's whole grace period, the function's timeout plus 10 s.
func TestPodsLeaveOnScaleDown(t *testing.T) {
	ns := namespace(t, "e2e-leave")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The watch sees each pod's last status, its containers' ends, before
	// the pod is gone.
	w, err := cluster.c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	sless(t, "deploy", "-f", filepath.Join(root, "config/samples/functions/hello.yaml"), "-n", ns)
	names := []string{"hello-go", "hello-python", "hello-node"}
	for _, name := range names {
		if a := mustInvokeKnown(t, ns, name, ""); a.code != 200 {
			t.Fatalf("%s: %d %s", name, a.code, a.body)
		}
	}
	// Idle, each scales to zero after its window (30 s) and grace (10 s).
	ended := map[string]*corev1.ContainerStateTerminated{} // by pod
	live := map[string]bool{}
	deadline := time.After(within)
	for first := true; first || len(live) > 0; first = false {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-deadline:
			t.Fatalf("pods still there after %s: %v", within, slices.Collect(maps.Keys(live)))
		}
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			t.Fatalf("pod watch: %v", ev.Object)
		}
		if ev.Type == watch.Deleted {
			delete(live, pod.Name)
		} else {
			live[pod.Name] = true
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.Name == controller.FunctionContainer && c.State.Terminated != nil {
				ended[pod.Name] = c.State.Terminated
			}
		}
	}
	for _, name := range names {
		found := false
		for pod, end := range ended {
			if !strings.HasPrefix(pod, name+"-") {
				continue
			}
			found = true
			if own := (end.ExitCode == 0 && end.Reason == "Completed") || (end.ExitCode == 143 && end.Reason == "Error"); !own {
				t.Errorf("%s's container in pod %s ended with %d (%s): want 0 (Completed) or 143 (Error), its own exit on SIGTERM",
					name, pod, end.ExitCode, end.Reason)
			}
		}
		if !found {
			t.Errorf("no pod of %s seen ending", name)
		}
	}
}
