//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"sless.dev/sless/internal/testfn"
)

// A WebSocket reaches a function at zero through the activator (its
// handshake buffered while the first instance starts), and a rollout of
// the function does not cut it: the old instance drains, kept until the
// WebSocket closes, and then goes: long before its drain bound (the
// timeout, 600 s, past the test's waits), which would end it anyway.
func TestWebSocketAcrossRollout(t *testing.T) {
	ns := namespace(t, "e2e-ws")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "chat", "go", "http-go", "Handle",
		"  timeoutSeconds: 600\n  scale: {initial: 0, max: 2, window: 6s, scaleToZeroGracePeriod: 0s}\n"))
	waitFor(t, "the function created at zero", func() bool {
		return function(t, ns, "chat").Status.ObservedGeneration > 0 && len(pods(t, ns, "chat")) == 0
	})
	mustInvokeKnown(t, ns, "chat", "/orders/7") // the activators know it; it starts
	waitFor(t, "back at zero", func() bool { return len(pods(t, ns, "chat")) == 0 })

	conn, _ := testfn.DialWebSocket(t, "ws"+strings.TrimPrefix(cluster.activator, "http")+"/fn/"+ns+"/chat/chat")
	testfn.CheckEcho(t, conn)
	old := podNames(t, ns, "chat")
	if len(old) != 1 {
		t.Fatalf("pods under the WebSocket: %v, want one", old)
	}

	addEnv(t, ns, "chat", corev1.EnvVar{Name: "VERSION", Value: "2"})
	// The old pod is deleted once its replacement is available.
	waitFor(t, "the old instance leaving", func() bool {
		return slices.ContainsFunc(pods(t, ns, "chat"), func(p corev1.Pod) bool { return p.Name == old[0] && p.DeletionTimestamp != nil })
	})
	testfn.CheckEcho(t, conn) // through the old instance, draining
	testfn.CloseHandshake(t, conn)
	waitFor(t, "the old instance gone once the WebSocket closed", func() bool {
		return !slices.ContainsFunc(pods(t, ns, "chat"), func(p corev1.Pod) bool { return p.Name == old[0] })
	})
}
