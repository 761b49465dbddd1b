//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/controller"
	"sless.dev/sless/load"
)

// steadyConcurrency is the function's limit of requests at one instance:
// what an instance killed outright may fail (docs/kubernetes.md).
const steadyConcurrency = 2

// Under 200 POSTs a second, sent once each as a client that cannot
// resend: a new function image, a rollout of the activators, a
// function pod deleted and an activator pod deleted fail no request
// (instances going away are drained; activators going away take new
// connections until their endpoints drop them, then drain). A function
// instance killed outright (its process by SIGKILL, its pod deleted with
// no grace) fails at most the requests it held, each answered 502: at most
// its concurrency.
func TestFaultsUnderLoad(t *testing.T) {
	ns := namespace(t, "e2e-faults")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "steady", "go", "hello-go", "Handle",
		fmt.Sprintf("  concurrency: %d\n  scale: {min: 2, initial: 2, max: 4}\n", steadyConcurrency)))
	if a := mustInvokeKnown(t, ns, "steady", ""); a.code != 200 {
		t.Fatalf("steady: %d %s", a.code, a.body)
	}
	waitFor(t, "steady with two instances ready", func() bool { return readyPods(t, ns, "steady") == 2 })
	url := cluster.activator + "/fn/" + ns + "/steady"

	underLoad(t, url, "a new image of the function", 0, func() {
		old := podNames(t, ns, "steady")
		addEnv(t, ns, "steady", corev1.EnvVar{Name: "VERSION", Value: "2"})
		waitFor(t, "the Deployment's template to carry the change", func() bool {
			var d appsv1.Deployment
			err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "steady"}, &d)
			return err == nil && slices.Contains(container(d.Spec.Template.Spec, controller.FunctionContainer).Env, corev1.EnvVar{Name: "VERSION", Value: "2"})
		})
		waitRolledOut(t, ns, "steady")
		waitFor(t, "every pod replaced, the old ones gone", func() bool {
			now := pods(t, ns, "steady")
			return len(now) == 2 && !slices.ContainsFunc(now, func(p corev1.Pod) bool { return slices.Contains(old, p.Name) })
		})
	})
	underLoad(t, url, "a rollout of the activators", 0, func() {
		restartActivators(t)
		waitFor(t, "the old activator pods gone", func() bool { return len(activatorPods(t)) == 2 })
	})
	underLoad(t, url, "a function pod deleted", 0, func() {
		gone := pods(t, ns, "steady")[0]
		deletePod(t, gone)
		waitFor(t, "the pod gone and two instances again", func() bool { return isGone(t, &gone) && readyPods(t, ns, "steady") == 2 })
	})
	underLoad(t, url, "an activator pod deleted", 0, func() {
		gone := activatorPods(t)[0]
		deletePod(t, gone)
		waitFor(t, "the activator pod gone and the activators available again", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return isGone(t, &gone) && waitAvailable(ctx, "sless-system", "sless-activator") == nil
		})
	})
	underLoad(t, url, "a function's process killed (SIGKILL)", steadyConcurrency, func() {
		p := pods(t, ns, "steady")[0]
		restarts := containerStatus(p, controller.FunctionContainer).RestartCount
		killContainer(t, p, controller.FunctionContainer)
		waitFor(t, "the process restarted, two instances ready", func() bool {
			var now corev1.Pod
			err := cluster.c.Get(context.Background(), client.ObjectKeyFromObject(&p), &now)
			return err == nil && containerStatus(now, controller.FunctionContainer).RestartCount > restarts && readyPods(t, ns, "steady") == 2
		})
	})
	underLoad(t, url, "a function pod deleted at once (--grace-period=0 --force)", steadyConcurrency, func() {
		p := pods(t, ns, "steady")[0]
		if out, err := kubectl(t, "-n", ns, "delete", "pod", p.Name, "--grace-period=0", "--force"); err != nil {
			t.Fatalf("kubectl delete --force: %v\n%s", err, out)
		}
		waitFor(t, "two instances again", func() bool { return readyPods(t, ns, "steady") == 2 })
	})
}

// underLoad does a fault while 200 POSTs a second go to url, each sent
// once (no hop may send a POST twice), and checks that every request was
// answered 200 but for at most lost 502s.
func underLoad(t *testing.T, url, fault string, lost int64, do func()) {
	t.Helper()
	t.Logf("under load: %s", fault)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan load.Result, 1)
	go func() {
		r, err := load.Run(ctx, load.Options{URL: url, Method: "POST", Body: []byte(`{"n":1}`), Rate: 200, Duration: time.Hour,
			Connections: 64, Timeout: time.Minute, AllowRemote: true})
		if err != nil {
			t.Errorf("load: %v", err)
		}
		ran <- r
	}()
	do()
	stop()
	r := <-ran
	t.Logf("%s: %d answers %v, %d without one", fault, r.Requests, r.Codes, r.Errors)
	failed := r.Requests - r.Codes[200]
	if r.Requests < 100 || r.Errors != 0 || failed != r.Codes[502] || failed > lost {
		t.Errorf("%s: %d answers, %d without one (%v), codes %v: want every request answered 200, but at most %d 502s",
			fault, r.Requests, r.Errors, r.TransportErrors, r.Codes, lost)
	}
}

// waitRolledOut waits for a function's Deployment to run its latest spec
// on every replica.
func waitRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, name+" rolled out", func() bool {
		var d appsv1.Deployment
		err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d)
		return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Spec.Replicas != nil &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas &&
			d.Status.AvailableReplicas == *d.Spec.Replicas
	})
}

// activatorPods lists the activators' pods, those leaving too.
func activatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := cluster.c.List(context.Background(), &list, client.InNamespace("sless-system"),
		client.MatchingLabels{"app.kubernetes.io/name": "sless-activator"}); err != nil || len(list.Items) == 0 {
		t.Fatalf("activator pods: %v", err)
	}
	return list.Items
}

// isGone reports whether a deleted pod has left the API server: its
// containers ended.
func isGone(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	err := cluster.c.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return apierrors.IsNotFound(err)
}

// podNames lists the names of a function's pods that are not being
// deleted.
func podNames(t *testing.T, ns, name string) []string {
	t.Helper()
	var names []string
	for _, p := range pods(t, ns, name) {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// container is the named container of a pod's spec (zero when missing).
func container(spec corev1.PodSpec, name string) corev1.Container {
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}

// containerStatus is the named container's status in a pod (zero when
// missing).
func containerStatus(p corev1.Pod, name string) corev1.ContainerStatus {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c
		}
	}
	return corev1.ContainerStatus{}
}

// deletePod deletes a pod as kubectl delete does: with its grace period.
func deletePod(t *testing.T, p corev1.Pod) {
	t.Helper()
	if err := cluster.c.Delete(context.Background(), &p); err != nil {
		t.Fatalf("delete pod %s: %v", p.Name, err)
	}
}

// containerd is the cluster's containerd socket (make cluster's).
var containerd = envOr("SLESS_E2E_CONTAINERD", "/run/sless-cluster/containerd.sock")

// killContainer kills a container's process with SIGKILL through the
// container runtime, as the kernel's OOM killer or a crash would end it:
// no signal it can handle, no drain.
func killContainer(t *testing.T, p corev1.Pod, name string) {
	t.Helper()
	id, ok := strings.CutPrefix(containerStatus(p, name).ContainerID, "containerd://")
	if !ok {
		t.Fatalf("pod %s: container %s has no containerd ID", p.Name, name)
	}
	if _, err := os.Stat(containerd); err != nil {
		t.Fatalf("the cluster's containerd: %v (SLESS_E2E_CONTAINERD)", err)
	}
	out, err := exec.Command("ctr", "--address", containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks kill %s: %v\n%s", id, err, out)
	}
}
