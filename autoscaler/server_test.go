package autoscaler_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
)

// What no one activator knows, the autoscaler answers for all of them: the
// requests waiting at every activator, added up, and its last decision,
// read by the activators' own client as their admin API does.
func TestScalingRoute(t *testing.T) {
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &recordingWriter{writes: map[string][]int32{}},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "a"} {
		a.SetFunction(time.Now(), autoscaler.Function{Namespace: "default", Name: name, Spec: kpa.Spec{
			Max: 10, Target: 1, StableWindow: 6 * time.Second}})
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	for _, body := range []string{
		`{"namespace":"default","name":"a","count":3,"activator":"one"}`,
		`{"namespace":"default","name":"a","count":4,"activator":"two"}`,
	} {
		resp, err := http.Post(srv.URL+"/v1/buffered", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if resp, err := http.Post(srv.URL+"/v1/poke", "application/json", bytes.NewBufferString(`{"namespace":"default","name":"a"}`)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	client := &activator.AutoscalerClient{BaseURL: srv.URL, Log: slog.New(slog.DiscardHandler)}
	got, err := client.Scaling(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("scaling %+v: want a then b", got)
	}
	if got[0].Buffered != 7 || got[0].Desired != 7 || got[1].Buffered != 0 {
		t.Errorf("a: %+v, b: %+v; want a with 7 waiting (3 + 4, at two activators) and 7 desired, b with none", got[0], got[1])
	}
}
