package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// fireLog stands in for the activators' admin API: it notes each fire the
// autoscalers send, by scheduled time.
type fireLog struct {
	mu    sync.Mutex
	fires map[string]int
	bad   []string
}

func (f *fireLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != wire.FirePath("default", "ticker", "every") || r.Header.Get("Authorization") != "Bearer tok" {
		f.bad = append(f.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		http.Error(w, "no", http.StatusNotFound)
		return
	}
	f.fires[r.Header.Get(wire.ScheduledTimeHeader)]++
	_, _ = w.Write([]byte(`{"status":200}`))
}

func (f *fireLog) count() (fires, dup int, bad []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.fires {
		dup += n - 1
	}
	return len(f.fires), dup, f.bad
}

// TestCronOnceAcrossAutoscalers runs two `sless autoscaler` processes on a
// real API server: only the leader fires, through the activators' admin
// API with the token of the admin Secret, and each fire is sent once, across a change of
// leader too (the ledger is a ConfigMap).
func TestCronOnceAcrossAutoscalers(t *testing.T) {
	cfg := controlplane.Start(t)
	kubeconfig := writeKubeconfig(t, cfg)
	c := controlplane.Client(t, cfg)
	log := &fireLog{fires: map[string]int{}}
	activator := httptest.NewServer(log)
	t.Cleanup(activator.Close)
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "ticker", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x", Scale: v1alpha1.Scale{Min: 1, Max: 1, Initial: ptr.To(int32(1))},
			Triggers: []v1alpha1.Trigger{{Name: "every", Cron: &v1alpha1.CronTrigger{Schedule: "@every 1s"}}}}}
	if err := c.Create(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	// The token the fires carry is the Secret's, as on a cluster.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-admin", Namespace: "default"}, StringData: map[string]string{"token": "tok"}}
	if err := c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	env := []string{"POD_NAMESPACE=default"}
	one := startAutoscalerWith(t, kubeconfig, env, "--activator-admin", activator.URL)
	two := startAutoscalerWith(t, kubeconfig, env, "--activator-admin", activator.URL)
	var leader, standby *autoscalerProcess
	eventually.TrueWithin(t, 30*time.Second, "one autoscaler to lead", func() bool {
		switch {
		case one.ready():
			leader, standby = one, two
		case two.ready():
			leader, standby = two, one
		}
		return leader != nil
	})
	eventually.TrueWithin(t, 30*time.Second, "3 fires", func() bool { n, _, _ := log.count(); return n >= 3 })
	leader.stop(t)
	eventually.TrueWithin(t, 30*time.Second, "the standby to take over", standby.ready)
	before, _, _ := log.count()
	eventually.TrueWithin(t, 30*time.Second, "3 fires by the new leader", func() bool { n, _, _ := log.count(); return n >= before+3 })
	standby.stop(t)

	if _, dup, bad := log.count(); dup > 0 || len(bad) > 0 {
		t.Errorf("%d fires sent twice; requests not a fire of default/ticker/every with the token: %q", dup, bad)
	}
	var ledger corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "sless-cron"}, &ledger); err != nil || ledger.Data["default_ticker_every"] == "" {
		t.Errorf("ledger ConfigMap: %v %v, want the trigger's last fire", ledger.Data, err)
	}
}
