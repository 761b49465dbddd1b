package autoscaler_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/autoscaler/shard"
	"sless.dev/sless/internal/wire"
)

// staticPeers says a function's owner from a fixed table (the
// Coordinator's answer, which its own tests check).
type staticPeers struct {
	self   string
	owner  map[string]string // function name → replica
	member map[string]shard.Member
}

func (p *staticPeers) Owner(_, name string) (shard.Member, bool) {
	m, ok := p.member[p.owner[name]]
	return m, ok
}

func (p *staticPeers) Peers() []shard.Member {
	var out []shard.Member
	for name, m := range p.member {
		if name != p.self {
			out = append(out, m)
		}
	}
	return out
}

// TestPushesPassedOn: two replicas, a scaling web and b scaling api. What
// an activator pushes to a for api reaches b; a lists what both scale; a
// function neither scales is refused by name, and one whose share is
// changing hands is refused as unavailable.
func TestPushesPassedOn(t *testing.T) {
	owner := map[string]string{"web": "a", "api": "b"}
	members := map[string]shard.Member{}
	scalers := map[string]*autoscaler.Autoscaler{}
	servers := map[string]*httptest.Server{}
	for name, fn := range map[string]string{"a": "web", "b": "api"} {
		a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &recordingWriter{writes: map[string][]int32{}},
			prometheus.NewRegistry(), slog.New(slog.DiscardHandler),
			autoscaler.WithPeers(&staticPeers{self: name, owner: owner, member: members}))
		if err != nil {
			t.Fatal(err)
		}
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: fn, Spec: kpa.Spec{Max: 10, Target: 1, StableWindow: 6 * time.Second}})
		srv := httptest.NewServer(a.Handler())
		t.Cleanup(srv.Close)
		scalers[name], servers[name] = a, srv
		members[name] = shard.Member{Name: name, Push: strings.TrimPrefix(srv.URL, "http://")}
	}

	code, body := push(t, servers["a"], wire.BufferedPath, wire.BufferedReport{Activator: "act-1", Functions: []wire.BufferedCount{
		{Namespace: "default", Name: "api", Count: 7}, {Namespace: "default", Name: "web", Count: 3}}})
	if code != http.StatusNoContent {
		t.Fatalf("report of both to a: %d %s", code, body)
	}
	now := time.Now()
	if got := bufferedOf(scalers["a"], now); got["web"] != 3 || len(got) != 1 {
		t.Errorf("a's counts: %v, want web 3 alone", got)
	}
	if got := bufferedOf(scalers["b"], now); got["api"] != 7 || len(got) != 1 {
		t.Errorf("b's counts: %v, want api 7 passed on", got)
	}
	if code, body := push(t, servers["a"], wire.PokePath, wire.Poke{Namespace: "default", Name: "api"}); code != http.StatusNoContent {
		t.Errorf("poke of api to a: %d %s, want b's 204", code, body)
	}

	all, err := (&activator.AutoscalerClient{BaseURL: servers["a"].URL}).Scaling(t.Context())
	if err != nil || len(all) != 2 || all[0].Name != "api" || all[0].Buffered != 7 || all[1].Name != "web" {
		t.Errorf("a's list: %+v %v, want api (7 waiting, from b) and web", all, err)
	}

	code, body = push(t, servers["a"], wire.BufferedPath, wire.BufferedReport{Activator: "act-1", Functions: []wire.BufferedCount{
		{Namespace: "default", Name: "gone", Count: 1}}})
	if code != http.StatusNotFound || !strings.Contains(body, "default/gone") {
		t.Errorf("report of a function no replica scales: %d %s, want 404 naming it", code, body)
	}
	if code, body := push(t, servers["a"], wire.PokePath, wire.Poke{Namespace: "default", Name: "gone"}); code != http.StatusServiceUnavailable {
		t.Errorf("poke of a function whose share has no holder: %d %s, want 503", code, body)
	}
}
