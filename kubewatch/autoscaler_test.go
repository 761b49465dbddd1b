package kubewatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kedascaler"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/kubewatch"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is the real autoscaler, with the feed's calls counted and
// the instances it pushes kept, since the autoscaler does not show them.
type recorder struct {
	*autoscaler.Autoscaler

	mu        sync.Mutex
	sets      map[string]int      // SetFunction calls by namespace/name
	instances map[string][]string // last SetInstances by namespace/name
}

func (r *recorder) SetFunction(now time.Time, fn autoscaler.Target) {
	r.mu.Lock()
	r.sets[fn.Namespace+"/"+fn.Name]++
	r.mu.Unlock()
	r.Autoscaler.SetFunction(now, fn)
}

func (r *recorder) SetInstances(namespace, name string, admins []string) {
	r.mu.Lock()
	r.instances[namespace+"/"+name] = admins
	r.mu.Unlock()
	r.Autoscaler.SetInstances(namespace, name, admins)
}

func (r *recorder) setCalls(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets[key]
}

func (r *recorder) lastInstances(key string) ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	admins, ok := r.instances[key]
	return admins, ok
}

// harness is a feed pushing to a real autoscaler that writes to a real API
// server and to a KEDA external scaler served over real gRPC, with the
// autoscaler's push endpoint served over HTTP.
type harness struct {
	c    client.Client
	deps client.Reader // the feed's cache of Deployments
	rec  *recorder
	keda externalscaler.ExternalScalerClient
	push string
}

func start(t *testing.T) *harness {
	t.Helper()
	h, _ := startOwning(t, nil)
	return h
}

// startOwning is start with the feed scaling what owns says.
func startOwning(t *testing.T, owns func(namespace, name string) bool) (*harness, *kubewatch.AutoscalerFeed) {
	t.Helper()
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	keda := kedascaler.New(quiet)
	kube := &kubewatch.KubernetesScaler{Client: c}
	router := kubewatch.NewReplicaRouter(kube, keda)
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), router, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Autoscaler: a, sets: map[string]int{}, instances: map[string][]string{}}
	w, err := kubewatch.NewAutoscalerFeed(cfg, rec, router, quiet)
	if err != nil {
		t.Fatal(err)
	}
	kube.Reader = w.Deployments()
	w.Owns = owns
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	push := httptest.NewServer(a.Handler())
	t.Cleanup(push.Close)
	return &harness{c: c, deps: w.Deployments(), rec: rec, keda: serveKEDA(t, keda), push: push.URL}, w
}

// TestOwnsFollowsTheShare: a feed scales the Functions its replica owns
// only; after the share changed, Resync takes up the newly owned and
// drops the others.
func TestOwnsFollowsTheShare(t *testing.T) {
	var mu sync.Mutex
	owned, asked := "a", map[string]bool{}
	owns := func(_, name string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked[name] = true
		return name == owned
	}
	h, feed := startOwning(t, owns)
	for _, name := range []string{"a", "b"} {
		if err := h.c.Create(t.Context(), function(name, nil)); err != nil {
			t.Fatal(err)
		}
	}
	scaled := func() []string {
		var names []string
		for _, s := range h.rec.Scaling(time.Now()) {
			names = append(names, s.Name)
		}
		return names
	}
	eventually.True(t, "a scaled alone, b seen", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asked["b"] && slices.Equal(scaled(), []string{"a"})
	})
	if n := h.rec.setCalls("default/b"); n != 0 {
		t.Errorf("b, not owned, pushed %d times", n)
	}
	mu.Lock()
	owned = "b"
	mu.Unlock()
	if err := feed.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := scaled(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("scaled after the share moved: %v, want b alone", got)
	}
}

func serveKEDA(t *testing.T, srv *kedascaler.Server) externalscaler.ExternalScalerClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Close()
		gs.GracefulStop()
	})
	return externalscaler.NewExternalScalerClient(conn)
}

// pushed posts what an activator would to path and returns the status.
func (h *harness) pushed(t *testing.T, path, name string, count int) int {
	t.Helper()
	var body any = wire.Poke{Namespace: "default", Name: name}
	if path == wire.BufferedPath {
		body = wire.BufferedReport{Functions: []wire.BufferedCount{{Namespace: "default", Name: name, Count: count}}}
	}
	b, _ := json.Marshal(body)
	resp, err := http.Post(h.push+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// demand makes requests wait in an activator for name, as it reports them:
// the buffered count, then a poke, which decides at once.
func (h *harness) demand(t *testing.T, name string, buffered int) {
	t.Helper()
	if code := h.pushed(t, wire.BufferedPath, name, buffered); code != http.StatusNoContent {
		t.Fatalf("push buffered for %s: %d", name, code)
	}
	if code := h.pushed(t, wire.PokePath, name, 0); code != http.StatusNoContent {
		t.Fatalf("poke %s: %d", name, code)
	}
}

// known waits until the autoscaler scales name (a poke is not 404).
func (h *harness) known(t *testing.T, name string) {
	t.Helper()
	eventually.True(t, name+" to be scaled", func() bool { return h.pushed(t, wire.BufferedPath, name, 0) == http.StatusNoContent })
}

func (h *harness) replicas(t *testing.T, name string) int32 {
	t.Helper()
	var dep appsv1.Deployment
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &dep); err != nil {
		t.Fatal(err)
	}
	return *dep.Spec.Replicas
}

// kedaMetric is what KEDA reads for name over gRPC: its desired replicas,
// or the gRPC code of the refusal.
func (h *harness) kedaMetric(t *testing.T, name string) (int64, codes.Code) {
	t.Helper()
	resp, err := h.keda.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{
		ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "so", Namespace: "default",
			ScalerMetadata: map[string]string{wire.KEDAFunction: name}},
	})
	if err != nil {
		return 0, status.Code(err)
	}
	return resp.MetricValues[0].MetricValue, codes.OK
}

// function is a valid Function starting at zero instances, with the
// default target of 100 × 70%: 250 waiting requests ask for 4 instances.
func function(name string, mutate func(*v1alpha1.FunctionSpec)) *v1alpha1.Function {
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x",
			Scale: v1alpha1.Scale{Initial: ptr.To(int32(0))}}}
	if mutate != nil {
		mutate(&fn.Spec)
	}
	return fn
}

func rabbitmq(s *v1alpha1.FunctionSpec) {
	s.Triggers = []v1alpha1.Trigger{{Name: "orders",
		RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "orders", ConnectionSecret: "amqp"}}}
}

// TestReplicasGoToTheirOwner: the replicas the autoscaler decides for a
// sless-owned function land in its Deployment through the scale
// subresource; those of KEDA-owned functions (owner keda, or a RabbitMQ
// trigger) reach KEDA over gRPC and leave the Deployment alone.
func TestReplicasGoToTheirOwner(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	cases := []struct {
		name         string
		mutate       func(*v1alpha1.FunctionSpec)
		wantReplicas int32 // in the Deployment
		wantKEDA     int64 // what KEDA reads
		wantCode     codes.Code
	}{
		{name: "web", wantReplicas: 4, wantCode: codes.NotFound},
		{name: "keda-web", mutate: func(s *v1alpha1.FunctionSpec) { s.Scale.Owner = v1alpha1.OwnerKEDA }, wantKEDA: 4, wantCode: codes.OK},
		{name: "orders", mutate: rabbitmq, wantKEDA: 4, wantCode: codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			controlplane.CreateDeployment(t, h.c, tc.name, 0)
			if err := h.c.Create(ctx, function(tc.name, tc.mutate)); err != nil {
				t.Fatal(err)
			}
			h.known(t, tc.name)
			h.demand(t, tc.name, 250)
			if got := h.replicas(t, tc.name); got != tc.wantReplicas {
				t.Errorf("Deployment replicas = %d, want %d", got, tc.wantReplicas)
			}
			if got, code := h.kedaMetric(t, tc.name); got != tc.wantKEDA || code != tc.wantCode {
				t.Errorf("KEDA reads %d (%v), want %d (%v)", got, code, tc.wantKEDA, tc.wantCode)
			}
		})
	}

	// keda-web handed back to sless: KEDA forgets it, its Deployment is
	// written from then on.
	var fn v1alpha1.Function
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "keda-web"}, &fn); err != nil {
		t.Fatal(err)
	}
	fn.Spec.Scale.Owner = v1alpha1.OwnerSless
	if err := h.c.Update(ctx, &fn); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "KEDA to forget keda-web", func() bool { _, code := h.kedaMetric(t, "keda-web"); return code == codes.NotFound })
	h.demand(t, "keda-web", 250)
	if got := h.replicas(t, "keda-web"); got != 4 {
		t.Errorf("keda-web owned by sless: Deployment replicas = %d, want 4", got)
	}

	// orders deleted: not scaled any more, and KEDA forgets it.
	if err := h.c.Delete(ctx, function("orders", nil)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "orders to be dropped", func() bool { return h.pushed(t, wire.PokePath, "orders", 0) == http.StatusNotFound })
	if _, code := h.kedaMetric(t, "orders"); code != codes.NotFound {
		t.Errorf("KEDA reads deleted orders with %v, want NotFound", code)
	}
}

// TestKEDAAnswersBeforeTheFirstDecision: a KEDA-owned function the
// autoscaler has not decided on yet is answered with the replicas its
// Deployment has, or its minimum without one: no error for KEDA to log.
func TestKEDAAnswersBeforeTheFirstDecision(t *testing.T) {
	h := start(t) // no Run: nothing decides
	ctx := context.Background()
	controlplane.CreateDeployment(t, h.c, "running", 3)
	keda := func(s *v1alpha1.FunctionSpec) { s.Scale.Owner = v1alpha1.OwnerKEDA }
	eventually.True(t, "the Deployment's replicas in the feed's cache", func() bool {
		var cached appsv1.Deployment
		err := h.deps.Get(ctx, client.ObjectKey{Namespace: "default", Name: "running"}, &cached)
		return err == nil && ptr.Deref(cached.Spec.Replicas, 0) == 3
	})
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.FunctionSpec)
		want   int64
	}{
		{"running", keda, 3},
		{"no-deployment-yet", func(s *v1alpha1.FunctionSpec) { keda(s); s.Scale.Min, s.Scale.Initial = 1, ptr.To(int32(1)) }, 1},
	} {
		if err := h.c.Create(ctx, function(tc.name, tc.mutate)); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, tc.name+" known to KEDA", func() bool { _, code := h.kedaMetric(t, tc.name); return code == codes.OK })
		if got, _ := h.kedaMetric(t, tc.name); got != tc.want {
			t.Errorf("KEDA reads %s before any decision: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestOnlyValidFunctionsAreScaled: a Function the shared validation
// refuses is not scaled, and one that turns invalid is dropped.
func TestOnlyValidFunctionsAreScaled(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	badCron := func(s *v1alpha1.FunctionSpec) {
		s.Triggers = []v1alpha1.Trigger{{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "61 * * * *"}}}
	}
	if err := h.c.Create(ctx, function("bad", badCron)); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Create(ctx, function("good", nil)); err != nil {
		t.Fatal(err)
	}
	// Events come in order: once good is scaled, bad has been seen.
	h.known(t, "good")
	if code := h.pushed(t, wire.PokePath, "bad", 0); code != http.StatusNotFound {
		t.Errorf("poke of the invalid function: %d, want 404 (not scaled)", code)
	}

	var fn v1alpha1.Function
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "good"}, &fn); err != nil {
		t.Fatal(err)
	}
	badCron(&fn.Spec)
	if err := h.c.Update(ctx, &fn); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "good to be dropped once invalid", func() bool { return h.pushed(t, wire.PokePath, "good", 0) == http.StatusNotFound })
}

// TestFunctionsResetOnlyOnChange: an update that changes nothing the
// autoscaler uses keeps the function's decider (no SetFunction); a change
// of its scale settings sets it again.
func TestFunctionsResetOnlyOnChange(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	if err := h.c.Create(ctx, function("web", nil)); err != nil {
		t.Fatal(err)
	}
	h.known(t, "web")
	update := func(mutate func(*v1alpha1.FunctionSpec)) {
		t.Helper()
		var fn v1alpha1.Function
		if err := h.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, &fn); err != nil {
			t.Fatal(err)
		}
		mutate(&fn.Spec)
		if err := h.c.Update(ctx, &fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(s *v1alpha1.FunctionSpec) { s.Image = "y"; s.Scale.Owner = v1alpha1.OwnerKEDA })
	// Events come in order: once marker is scaled, the update was seen.
	if err := h.c.Create(ctx, function("marker", nil)); err != nil {
		t.Fatal(err)
	}
	h.known(t, "marker")
	if n := h.rec.setCalls("default/web"); n != 1 {
		t.Errorf("after an image and owner change: %d SetFunction calls, want 1", n)
	}
	update(func(s *v1alpha1.FunctionSpec) { s.Scale.Target = 10 })
	eventually.True(t, "the new target to be set", func() bool { return h.rec.setCalls("default/web") == 2 })
}

// TestInstancesFromEndpointSlices: the autoscaler gets the admin address
// of each ready, not terminating endpoint of a function's EndpointSlices:
// the slice's port named admin, or 9091 when it names none; also for
// slices that exist before their Function.
func TestInstancesFromEndpointSlices(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hello-a", Namespace: "default", Labels: map[string]string{wire.FunctionLabel: "hello"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To(int32(8012))},
			{Name: ptr.To("admin"), Port: ptr.To(int32(9191))},
		},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Terminating: ptr.To(true)}},
			{Addresses: []string{"10.0.0.4"}}, // no condition: ready
		},
	}
	if err := h.c.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	other := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "other-a", Namespace: "default", Labels: map[string]string{wire.FunctionLabel: "other"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.9.9"}}},
	}
	if err := h.c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Create(ctx, function("hello", nil)); err != nil {
		t.Fatal(err)
	}
	wantInstances(t, h, "hello", "10.0.0.1:9191", "10.0.0.4:9191")

	second := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hello-b", Namespace: "default", Labels: map[string]string{wire.FunctionLabel: "hello"}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8012))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"fd00::1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if err := h.c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	wantInstances(t, h, "hello", "10.0.0.1:9191", "10.0.0.4:9191", "[fd00::1]:9091")

	slice.Endpoints[0].Conditions.Terminating = ptr.To(true)
	if err := h.c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	wantInstances(t, h, "hello", "10.0.0.4:9191", "[fd00::1]:9091")

	for _, s := range []*discoveryv1.EndpointSlice{slice, second} {
		if err := h.c.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	wantInstances(t, h, "hello")
	if _, pushed := h.rec.lastInstances("default/other"); pushed {
		t.Error("instances pushed for other, which is no Function")
	}
}

func wantInstances(t *testing.T, h *harness, name string, want ...string) {
	t.Helper()
	var got []string
	if !eventually.Holds(eventually.Within, func() bool {
		var ok bool
		got, ok = h.rec.lastInstances("default/" + name)
		return ok && slices.Equal(got, want)
	}) {
		t.Fatalf("instances of %s = %q, want %q", name, got, want)
	}
}

// A feed whose cache cannot list gives up after SyncTimeout and says
// why, rather than keeping the Lease and scaling nothing.
func TestRunFailsWhenForbidden(t *testing.T) {
	cfg := rest.CopyConfig(controlplane.Start(t))
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-rbac"}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), nil, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kubewatch.NewAutoscalerFeed(cfg, a, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	w.SyncTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not sync within 2s") || !strings.Contains(err.Error(), "ServiceAccount") {
		t.Fatalf("Run = %v, want the sync timeout naming the ServiceAccount", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when the test's context ended")
	}
}
