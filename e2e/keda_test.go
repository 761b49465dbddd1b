//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqptest"
)

// handledIDs collects the ids that a test's functions report handled, by
// POST to the URL it returns, reachable from pods: how often each was, so
// that a message delivered twice cannot stand in for one never delivered.
func handledIDs(t *testing.T) (url string, ids func() map[string]int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[string(id)]++
		mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/", func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// worker is a Python function that takes 50 ms a call and reports its id
// to HANDLED_URL: a run's id (Sless-Run-Id) for a run's attempt, else the
// body, a message's id.
const worker = `import os, time, urllib.request

def handle(event):
    time.sleep(0.05)
    handled = event['headers'].get('sless-run-id', event['body'])
    urllib.request.urlopen(urllib.request.Request(os.environ['HANDLED_URL'], data=handled.encode(), method='POST'), timeout=30).read()
    return 'ok'
`

// deployWorker deploys worker as the Function name in ns with sless
// deploy, reporting to handledURL; spec is the rest of its spec (YAML,
// indented by two).
func deployWorker(t *testing.T, ns, name, handledURL, spec string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, "main.py"), []byte(worker), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".yaml")
	manifest := fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: %s}\nspec:\n  runtime: python\n  source: ./%s\n"+
		"  env: [{name: HANDLED_URL, value: %q}]\n%s", name, name, handledURL, spec)
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sless(t, "deploy", "-f", file, "-n", ns)
}

// RabbitMQ through the real KEDA and HPA: 5,000 messages to a function at
// zero wake it, KEDA's HPA wants more than one pod, every message is handled
// (each id reported, none dead-lettered), and it returns to zero.
func TestRabbitMQThroughKEDA(t *testing.T) {
	ns := namespace(t, "e2e-keda")
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "keda")
	dlq := amqptest.Queue(t, ch, "keda-dlq")
	// The machine's broker, relayed onto the bridge: pods reach it there.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "amqp"},
		StringData: map[string]string{"url": "amqp://guest:guest@" + nodeIP + ":5672/"}}
	if err := cluster.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	handledURL, handled := handledIDs(t)
	// 10 at a time, one instance takes 25 s for the lot: long enough for
	// the HPA to want more.
	deployWorker(t, ns, "worker", handledURL, fmt.Sprintf("  scale: {initial: 0, max: 4, window: 10s, scaleToZeroGracePeriod: 5s}\n"+
		"  triggers:\n    - {name: jobs, rabbitmq: {queue: %s, connectionSecret: amqp, prefetch: 10, targetQueueLength: 5, deadLetterQueue: %s}}\n",
		queue, dlq))
	waitFor(t, "KEDA to take the ScaledObject as ready, the function at zero", func() bool {
		return scaledObjectReady(t, ns, "worker") && len(pods(t, ns, "worker")) == 0
	})

	bodies := make([][]byte, 5000)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "%d", i)
	}
	amqptest.Publish(t, ch, queue, bodies...)
	var desired int32
	waitFor(t, "every message handled", func() bool {
		desired = max(desired, hpaDesired(t, ns, "keda-hpa-worker"))
		return len(handled()) == len(bodies) && amqptest.Depth(t, ch, queue) == 0
	})
	ids := handled()
	for _, b := range bodies {
		if ids[string(b)] == 0 {
			t.Errorf("message %s never handled", b)
		}
	}
	if desired < 2 {
		t.Errorf("KEDA's HPA wanted at most %d replicas while 5,000 messages waited, want 2 or more", desired)
	}
	if n := amqptest.Depth(t, ch, dlq); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	waitFor(t, "the function back at zero", func() bool { return len(pods(t, ns, "worker")) == 0 })
}

// scaledObjectReady reports whether KEDA took a function's ScaledObject as
// ready (its own condition, for its own reason) and the Function says KEDA
// writes its replicas.
func scaledObjectReady(t *testing.T, ns, name string) bool {
	t.Helper()
	var so kedav1alpha1.ScaledObject
	if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &so); err != nil {
		return false
	}
	ready := so.Status.Conditions.GetReadyCondition()
	fn := meta.FindStatusCondition(function(t, ns, name).Status.Conditions, v1alpha1.ConditionScalingReady)
	return ready.IsTrue() && ready.Reason == kedav1alpha1.ScaledObjectConditionReadySuccessReason &&
		fn != nil && fn.Status == metav1.ConditionTrue && fn.Reason == v1alpha1.ReasonScaledObjectReady
}

// hpaDesired is the desired replicas of an HPA, 0 before it has any.
func hpaDesired(t *testing.T, ns, name string) int32 {
	t.Helper()
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &hpa); err != nil {
		return 0
	}
	return hpa.Status.DesiredReplicas
}
