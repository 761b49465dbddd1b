package kubewatch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"sless.dev/sless/activator"
	"sless.dev/sless/activator/activatortest"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/kubewatch"
	"sless.dev/sless/queueproxy/queueproxytest"
)

func TestMain(m *testing.M) {
	testfn.RunIfChild()
	os.Exit(m.Run())
}

type nopPoker struct{}

func (nopPoker) Poke(string, string) {}

// newActivator is an activator with cfg, for a feed to fill.
func newActivator(t *testing.T, cfg activator.Config) *activator.Activator {
	t.Helper()
	a, err := activator.New(cfg, nopPoker{}, invocation.NewRing(10), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runFeed feeds a from the cluster of cfg until the test ends, once setup
// (when set) has changed the feed, and returns the context it runs in.
func runFeed(t *testing.T, cfg *rest.Config, a *activator.Activator, setup func(*kubewatch.ActivatorFeed)) context.Context {
	t.Helper()
	w, err := kubewatch.NewActivatorFeed(cfg, a, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestEndpointSlicesRouteTraffic runs the feed against a real API server
// with EndpointSlices pointing at real queue-proxies: the activator sends
// to ready endpoints only, and buffers when none is left. The API server
// refuses loopback IPs in EndpointSlices, so the slices name the instances
// by names under .test, which resolve nowhere, and the activator's dialer
// maps them to 127.0.0.1.
func TestEndpointSlicesRouteTraffic(t *testing.T) {
	cfg := controlplane.Start(t)
	a := newActivator(t, activator.Config{Dial: loopbackDial})
	a.SetFunction(activator.RouteSpec{Namespace: "default", Name: "hello", HTTP: true, Timeout: 5 * time.Second})
	ctx := runFeed(t, cfg, a, nil)
	base := serve(t, a)

	one, two := queueproxytest.Start(t), queueproxytest.Start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	slices := kube.DiscoveryV1().EndpointSlices("default")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hello-abc", Labels: map[string]string{wire.FunctionLabel: "hello"}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(port(t, one.Addr)))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"one.sless.test"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	slice, err := slices.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the first instance to serve", func() bool { return get(base) == 200 })

	// The second instance, in a slice of its own, is terminating: it must
	// get nothing new. Then the first one stops being ready and the
	// function has no instance: requests wait.
	second := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hello-def", Labels: map[string]string{wire.FunctionLabel: "hello"}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(int32(port(t, two.Addr)))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"two.sless.test"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}}},
	}
	if _, err := slices.Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice.Endpoints[0].Conditions.Ready = ptr.To(false)
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the function to have no ready instance", func() bool { return instances(a) == 0 })
	waited := sendWaiting(t, a, base)

	// Making the second ready serves the waiting request.
	second.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(true)}
	if _, err := slices.Update(ctx, second, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := <-waited; code != 200 {
		t.Errorf("the request waiting when the second became ready: %d, want 200", code)
	}
	if code := get(base); code != 200 {
		t.Errorf("after the second became ready: %d, want 200", code)
	}

	// Deleting every slice leaves nothing: new requests buffer again.
	for _, name := range []string{"hello-abc", "hello-def"} {
		if err := slices.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "the function to have no instance after the slices are gone", func() bool { return instances(a) == 0 })
	sendWaiting(t, a, base)
}

// instances counts the instances the activator routes hello to.
func instances(a *activator.Activator) int {
	for _, fn := range a.Functions() {
		if fn.Name == "hello" {
			return fn.Instances
		}
	}
	return -1
}

// sendWaiting sends one request to a function with no instance and waits
// until the activator holds it; its status arrives on the channel once
// answered.
func sendWaiting(t *testing.T, a *activator.Activator, url string) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- get(url) }()
	eventually.True(t, "the request to wait for an instance", func() bool { return a.Waiting("default", "hello") == 1 })
	return done
}

// loopbackDial sends <anything>.sless.test:<port> to 127.0.0.1:<port> and
// refuses every other address, so no test traffic can leave the machine.
func loopbackDial(addr string, timeout time.Duration) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.HasSuffix(host, ".sless.test") {
		return nil, fmt.Errorf("test dialer: %q is not a test instance", addr)
	}
	return net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), timeout)
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func serve(t *testing.T, a *activator.Activator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := forward.NewServer(a.ServeHTTP, nil, activator.DefaultMaxBodyBytes, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/fn/default/hello/echo"
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func get(url string) int {
	resp, err := httpClient.Get(url)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestFunctionsAreServed: the activator serves the valid Functions of the
// cluster as they come, change and go.
func TestFunctionsAreServed(t *testing.T) {
	cfg := controlplane.Start(t)
	a := newActivator(t, activator.Config{})
	c := controlplane.Client(t, cfg)
	existing := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "early", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x"}}
	if err := c.Create(t.Context(), existing); err != nil {
		t.Fatal(err)
	}
	ctx := runFeed(t, cfg, a, nil)
	if fns := a.Functions(); len(fns) != 1 || fns[0].Name != "early" || !fns[0].HTTP || fns[0].Timeout != 300*time.Second {
		t.Fatalf("after the initial sync the activator serves %+v, want early with its defaults", fns)
	}

	cron := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x", Concurrency: 4,
			Triggers: []v1alpha1.Trigger{{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "@hourly"}}}}}
	invalid := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "bad-cron", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x",
			Triggers: []v1alpha1.Trigger{{Name: "tick", Cron: &v1alpha1.CronTrigger{Schedule: "61 * * * *"}}}}}
	for _, fn := range []*v1alpha1.Function{cron, invalid} {
		if err := c.Create(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "nightly to be known", func() bool { return len(a.Functions()) == 2 })
	fns := a.Functions()
	if fns[1].Name != "nightly" || fns[1].HTTP || fns[1].Concurrency != 4 {
		t.Errorf("nightly served as %+v, want no HTTP and concurrency 4", fns[1])
	}
	if err := c.Delete(ctx, existing); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "early to be gone", func() bool { fns := a.Functions(); return len(fns) == 1 && fns[0].Name == "nightly" })
}

// A feed that cannot list gives up after its SyncTimeout and says what
// to check, instead of leaving the activator unready and silent.
func TestWatchFailsWhenForbidden(t *testing.T) {
	cfg := rest.CopyConfig(controlplane.Start(t))
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-rbac"}
	a := newActivator(t, activator.Config{})
	w, err := kubewatch.NewActivatorFeed(cfg, a, quiet)
	if err != nil {
		t.Fatal(err)
	}
	w.SyncTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	const what = "functions.sless.dev and endpointslices"
	if err == nil || !strings.Contains(err.Error(), what+" did not sync within 2s") || !strings.Contains(err.Error(), "activator's ServiceAccount") {
		t.Fatalf("Run = %v, want the sync timeout naming %s and the activator's ServiceAccount", err, what)
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when the test's context ended")
	}
}

// peerSink records what Peers pushes.
type peerSink struct{ got chan activator.Peers }

func (s peerSink) SetPeers(p activator.Peers) { s.got <- p }

// TestPeersFromTheActivatorService: the activator learns how many
// activators are ready, and which it is, from its own Service's
// EndpointSlices as they change, on the real API server.
func TestPeersFromTheActivatorService(t *testing.T) {
	cfg := controlplane.Start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink := peerSink{got: make(chan activator.Peers, 100)}
	w, err := kubewatch.NewPeers(cfg, "sless-system", "sless-activator", "10.0.0.2", sink, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := w.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	expect := func(want activator.Peers) {
		t.Helper()
		for deadline := time.After(10 * time.Second); ; {
			select {
			case got := <-sink.got:
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("peers never became %+v", want)
			}
		}
	}
	expect(activator.Peers{N: 0, Self: -1})
	endpoint := func(ip string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "sless-activator-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "sless-activator"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))},
			{Name: ptr.To("admin"), Port: ptr.To(int32(9090))}},
		Endpoints: []discoveryv1.Endpoint{endpoint("10.0.0.2", true), endpoint("10.0.0.1", true)},
	}
	slices := kube.DiscoveryV1().EndpointSlices("sless-system")
	created, err := slices.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect(activator.Peers{N: 2, Self: 1})
	if others := w.Others(); len(others) != 1 || others[0] != "10.0.0.1:9090" {
		t.Errorf("others %v, want the other activator's admin address 10.0.0.1:9090", others)
	}
	created.Endpoints = []discoveryv1.Endpoint{endpoint("10.0.0.2", true), endpoint("10.0.0.1", false)}
	if _, err := slices.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(activator.Peers{N: 1, Self: 0})
	if others := w.Others(); len(others) != 0 {
		t.Errorf("others %v with the other activator unready, want none", others)
	}
	if err := slices.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(activator.Peers{N: 0, Self: -1})
}

// TestStartingInstancesProbed: an instance its slice still calls not ready
// takes requests as soon as its queue-proxy answers ready, without waiting
// for the kubelet's next probe and the slice; one whose queue-proxy says it
// is not ready takes none.
func TestStartingInstancesProbed(t *testing.T) {
	cfg := controlplane.Start(t)
	a := newActivator(t, activator.Config{Dial: loopbackDial})
	a.SetFunction(activator.RouteSpec{Namespace: "default", Name: "hello", HTTP: true, Timeout: 30 * time.Second})
	a.SetFunction(activator.RouteSpec{Namespace: "default", Name: "unready", HTTP: true, Timeout: time.Second})
	ctx := runFeed(t, cfg, a, func(w *kubewatch.ActivatorFeed) {
		w.Dial = func(ctx context.Context, _, addr string) (net.Conn, error) { return loopbackDial(addr, time.Second) }
	})
	base := serve(t, a)
	inst := queueproxytest.Start(t)
	// An admin port that never says ready, beside a serving port that
	// would answer.
	unready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(unready.Close)

	slices := kubernetes.NewForConfigOrDie(cfg).DiscoveryV1().EndpointSlices("default")
	for name, admin := range map[string]string{"hello": inst.AdminAddr, "unready": unready.Listener.Addr().String()} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-abc", Labels: map[string]string{wire.FunctionLabel: name}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To(wire.ServingPortName), Port: ptr.To(int32(port(t, inst.Addr)))},
				{Name: ptr.To(wire.AdminPortName), Port: ptr.To(int32(port(t, admin)))}},
			// Two names for the one machine: the dialer maps both to it.
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{name + ".sless.test"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
		}
		if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, "the starting instance to serve", func() bool { return get(base) == 200 })
	if code := get(strings.Replace(base, "/hello/", "/unready/", 1)); code != http.StatusGatewayTimeout {
		t.Errorf("a function whose only instance says it is not ready: %d, want 504 after waiting its timeout", code)
	}
}

// TestDeletedFunctionAnswersItsWaiters: requests waiting for a Function at
// zero are answered 404, naming it, as soon as the Function is deleted,
// not at its timeout.
func TestDeletedFunctionAnswersItsWaiters(t *testing.T) {
	cfg := controlplane.Start(t)
	a := newActivator(t, activator.Config{})
	ctx := runFeed(t, cfg, a, nil)
	c := controlplane.Client(t, cfg)
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x", TimeoutSeconds: 120}}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "hello to be known", func() bool { return len(a.Functions()) == 1 })

	base := serve(t, a)
	waiters := activatortest.Wait(base, 3, time.Minute) // under the function's 120 s
	eventually.True(t, "the requests to wait", func() bool { return a.Waiting("default", "hello") == 3 })
	deleted := time.Now()
	if err := c.Delete(ctx, fn); err != nil {
		t.Fatal(err)
	}
	waiters.ExpectRemoved(t, "default", "hello", deleted)
	if code := get(base); code != http.StatusNotFound {
		t.Errorf("a request after the delete: %d, want 404", code)
	}
}
