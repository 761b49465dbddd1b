//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/invocation"
)

// handled sums, over every activator, the invocations of a function by a
// trigger that were answered 200: each activator keeps the records that
// passed through it (the queue-proxies post theirs through the Service).
func handled(t *testing.T, ns, name, trigger string) int64 {
	t.Helper()
	var list corev1.PodList
	if err := cluster.c.List(context.Background(), &list, client.InNamespace("sless-system"),
		client.MatchingLabels{"app.kubernetes.io/name": "sless-activator"}); err != nil {
		t.Fatal(err)
	}
	token := adminToken(t)
	var n int64
	for _, p := range list.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.Status.PodIP+":9090/v1/namespaces/"+ns+"/functions/"+name+"/invocations/summary", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var s invocation.Summary
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("summary from %s: %s %v", p.Name, resp.Status, err)
		}
		for _, tr := range s.Triggers {
			if tr.Trigger == trigger {
				n += tr.Count - tr.Errors
			}
		}
	}
	return n
}

// RabbitMQ through the real KEDA and HPA: 5,000 messages to a function at
// zero wake it, the HPA scales it past one pod, every message is handled
// (none is dead-lettered), and it returns to zero.
func TestRabbitMQThroughKEDA(t *testing.T) {
	ns := namespace(t, "e2e-keda")
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "keda")
	dlq := amqptest.Queue(t, ch, "keda-dlq")
	// The machine's broker, relayed onto the bridge: pods reach it there.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "amqp"},
		StringData: map[string]string{"url": "amqp://guest:guest@10.244.0.1:5672/"}}
	if err := cluster.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "worker")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// 50 ms a message, 10 at a time: one instance takes 25 s for the
	// lot, long enough for the HPA to add more.
	if err := os.WriteFile(filepath.Join(src, "main.py"), []byte("import time\n\ndef handle(event):\n    time.sleep(0.05)\n    return 'ok'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(src), "worker.yaml")
	manifest := fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: worker}\nspec:\n  runtime: python\n  source: ./worker\n"+
		"  scale: {initial: 0, max: 4, window: 10s, scaleToZeroGracePeriod: 5s}\n"+
		"  triggers:\n    - {name: jobs, rabbitmq: {queue: %s, connectionSecret: amqp, prefetch: 10, targetQueueLength: 5, deadLetterQueue: %s}}\n", queue, dlq)
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sless(t, "deploy", "-f", file, "-n", ns)
	waitFor(t, "KEDA to take the ScaledObject, the function at zero", func() bool {
		fn := function(t, ns, "worker")
		for _, c := range fn.Status.Conditions {
			if c.Type == "ScalingReady" && c.Status == metav1.ConditionTrue {
				return len(pods(t, ns, "worker")) == 0
			}
		}
		return false
	})

	bodies := make([][]byte, 5000)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"n":%d}`, i)
	}
	amqptest.Publish(t, ch, queue, bodies...)
	peak := 0
	waitFor(t, "every message handled", func() bool {
		peak = max(peak, readyPods(t, ns, "worker"))
		return handled(t, ns, "worker", "rabbitmq") >= 5000 && amqptest.Depth(t, ch, queue) == 0
	})
	if peak < 2 {
		t.Errorf("at most %d instance ready while 5,000 messages waited: the HPA did not scale past one", peak)
	}
	if n := amqptest.Depth(t, ch, dlq); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	waitFor(t, "the function back at zero", func() bool { return len(pods(t, ns, "worker")) == 0 })
}
