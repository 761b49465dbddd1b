package kubeadmin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/activator"
	"sless.dev/sless/adminapi"
	"sless.dev/sless/adminapi/kubeadmin"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/kubewatch"
	"sless.dev/sless/timeline"
)

// The admin API on Kubernetes against a real API server: Functions from
// the watch with their states, and the console's actions as patches of
// the Function, refused (and nothing changed) when they cannot hold.
func TestBackend(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	web := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeNode, Image: "x", Scale: v1alpha1.Scale{Max: 4},
			Triggers: []v1alpha1.Trigger{{Name: "page", HTTP: &v1alpha1.HTTPTrigger{}}, {Name: "jobs", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "jobs", ConnectionSecret: "amqp"}}}}}
	if err := c.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	web.Status = v1alpha1.FunctionStatus{Replicas: 2, ReadyReplicas: 1, DesiredReplicas: 2, URL: "http://web.default.example",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()},
			{Type: v1alpha1.ConditionTriggersReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTriggerFailing,
				Message: "trigger jobs: queue jobs: NOT_FOUND", LastTransitionTime: metav1.Now()}},
		Triggers: []v1alpha1.TriggerStatus{{Name: "jobs", Message: "queue jobs: NOT_FOUND"}}}
	if err := c.Status().Update(ctx, web); err != nil {
		t.Fatal(err)
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fns, err := kubewatch.NewActivatorFeed(cfg, sink{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := fns.Run(wctx); err != nil {
		t.Fatal(err)
	}
	tl := timeline.New()
	b := &kubeadmin.Backend{Reader: fns.Reader(), Client: c, Timeline: tl, Invoke: "http://127.0.0.1:1",
		Waiting: waitingForWeb(3)}
	go b.Sample(wctx, 50*time.Millisecond)
	// A peer activator, whose own invocations the views merge; and one
	// that does not answer, which they leave out.
	peerTL := timeline.New()
	peerTL.Track("default", "web")
	peerB := &kubeadmin.Backend{Reader: fns.Reader(), Client: c, Timeline: peerTL,
		Waiting: waitingForWeb(4)}
	// It samples each second, as an activator does: the merged series'
	// last second has both activators' samples whenever it is looked at.
	go peerB.Sample(wctx, 50*time.Millisecond)
	peer := httptest.NewServer(kubeadmin.Handler(peerB, &kubeadmin.Whole{Local: peerTL}, nil))
	t.Cleanup(peer.Close)
	whole := &kubeadmin.Whole{Local: tl, Peers: func() []string { return []string{strings.TrimPrefix(peer.URL, "http://"), "127.0.0.1:1"} },
		Token: func() string { return "t" }, Client: http.DefaultClient, Log: quiet}
	b.View = whole.View
	// The autoscaler's view, as its /v1/scaling answers (tested with the
	// autoscaler): every activator's waiting requests, panic, queue depth.
	b.Scaling = func(context.Context) ([]wire.Scaling, error) {
		return []wire.Scaling{{Namespace: "default", Name: "web", Desired: 2, Panic: true, Buffered: 9, QueueDepth: 12}}, nil
	}
	srv := httptest.NewServer(kubeadmin.Handler(b, whole, nil))
	t.Cleanup(srv.Close)

	var list struct{ Functions []adminapi.Status }
	if code := send(t, srv.URL, "GET", "/v1/functions", "", &list); code != 200 || len(list.Functions) != 1 {
		t.Fatalf("list: %d %+v", code, list)
	}
	got := list.Functions[0]
	if got.State != "ready" || got.Ready != 1 || got.Desired != 2 || got.Starting != 1 || got.URL != "http://web.default.example" {
		t.Errorf("web: %+v", got)
	}
	if !got.Panic || got.Buffered != 9 || got.QueueDepth != 12 {
		t.Errorf("web: panic %v, buffered %d, queue depth %d; want the autoscaler's true, 9 (3 here and 6 elsewhere), 12",
			got.Panic, got.Buffered, got.QueueDepth)
	}
	if tr := got.Triggers; len(tr) != 2 || tr[0].State != "active" || tr[1].State != "failing" || tr[1].Error != "queue jobs: NOT_FOUND" {
		t.Errorf("triggers %+v: want page active, jobs failing with the controller's message", tr)
	}

	var st adminapi.Status
	if code := send(t, srv.URL, "PATCH", "/v1/namespaces/default/functions/web/triggers/page", `{"enabled": false}`, &st); code != 200 || st.Triggers[0].State != "disabled" {
		t.Fatalf("disable page: %d %+v", code, st.Triggers)
	}
	stored := &v1alpha1.Function{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, stored); err != nil {
		t.Fatal(err)
	}
	if stored.Spec.Triggers[0].IsEnabled() || !stored.Spec.Triggers[1].IsEnabled() {
		t.Errorf("stored triggers %+v: want page disabled, jobs untouched", stored.Spec.Triggers)
	}
	if code := send(t, srv.URL, "PATCH", "/v1/namespaces/default/functions/web/scale", `{"min": 1, "max": 3}`, &st); code != 200 || st.Spec.Scale.Min != 1 || st.Spec.Scale.Max != 3 {
		t.Fatalf("scale: %d %+v", code, st.Spec.Scale)
	}

	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		errContains              string
	}{
		{"unknown trigger", "PATCH", "web/triggers/nope", `{"enabled": true}`, 404, `no trigger "nope"`},
		{"unknown function", "GET", "nope", "", 404, "unknown function default/nope"},
		{"min above max", "PATCH", "web/scale", `{"min": 5}`, 400, "spec.scale.min: Invalid value: 5: must not exceed max (3)"},
		{"max above the CRD's bound", "PATCH", "web/scale", `{"max": 100000}`, 400, "spec.scale.max: Invalid value: 100000: must be between 1 and 1000"},
		{"invoke unknown", "POST", "nope/invoke", `{}`, 404, "unknown function"},
		{"invoke, no activator", "POST", "web/invoke", `{}`, 502, "invoke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e struct{ Error string }
			if code := send(t, srv.URL, tc.method, "/v1/namespaces/default/functions/"+tc.path, tc.body, &e); code != tc.code || !strings.Contains(e.Error, tc.errContains) {
				t.Errorf("%d %q, want %d with %q", code, e.Error, tc.code, tc.errContains)
			}
		})
	}

	var m adminapi.Manifest
	if code := send(t, srv.URL, "GET", "/v1/namespaces/default/functions/web/manifest", "", &m); code != 200 ||
		!strings.Contains(m.YAML, "kind: Function") || strings.Contains(m.YAML, "managedFields") {
		t.Errorf("manifest: %d %s", code, m.YAML)
	}
	tl.Add(invocation.Record{Namespace: "default", Function: "web", Status: 200, Start: time.Now(), Duration: time.Millisecond})
	for range 4 {
		peerTL.Add(invocation.Record{Namespace: "default", Function: "web", Status: 502, Start: time.Now(), Duration: time.Millisecond, ColdStart: true})
	}
	// The merged view is kept for a moment: one built before the records
	// were added may answer first.
	eventually.True(t, "the timeline samples web, with its peer's, and the view holds both's invocations", func() bool {
		var s timeline.Series
		send(t, srv.URL, "GET", "/v1/namespaces/default/functions/web/timeline", "", &s)
		n := len(s.Ready) - 1
		var one adminapi.Status
		send(t, srv.URL, "GET", "/v1/namespaces/default/functions/web", "", &one)
		return n > 0 && s.Ready[n] != nil && *s.Ready[n] == 1 && *s.Desired[n] == 2 && *s.Buffered[n] == 3+4 &&
			one.Stats.Requests == 5
	})
	// Whichever activator answers, the invocations are all of them.
	for _, base := range []string{srv.URL, peer.URL} {
		var one adminapi.Status
		send(t, base, "GET", "/v1/namespaces/default/functions/web", "", &one)
		if base == srv.URL && (one.Stats.Requests != 5 || one.Stats.Errors != 4 || one.Stats.ColdStarts != 4) {
			t.Errorf("stats %+v: want this activator's 1 request and its peer's 4 (errors, cold)", one.Stats)
		}
		if base == peer.URL && one.Stats.Requests != 4 {
			t.Errorf("the peer, which knows no peers: stats %+v, want its own 4 requests", one.Stats)
		}
	}
}

// sink takes the watch's Functions; only the watch's cache matters here.
type sink struct{}

func (sink) SetFunction(activator.RouteSpec)       {}
func (sink) RemoveFunction(_, _ string)            {}
func (sink) SetUnavailable(_, _, _ string)         {}
func (sink) SetEndpoints(string, string, []string) {}

// waitingForWeb is an activator's count of waiting requests: n for
// default/web, none for any other function.
func waitingForWeb(n int) func(namespace, name string) int {
	return func(namespace, name string) int {
		if namespace == "default" && name == "web" {
			return n
		}
		return 0
	}
}

func send(t *testing.T, base, method, path, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode
}
