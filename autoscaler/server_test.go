package autoscaler_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/internal/wire"
)

// pushServer serves the handler of an autoscaler that scales the named
// functions of default.
func pushServer(t *testing.T, names ...string) (*autoscaler.Autoscaler, *httptest.Server) {
	t.Helper()
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), &recordingWriter{writes: map[string][]int32{}},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		a.SetFunction(time.Now(), autoscaler.Target{Namespace: "default", Name: name, Spec: kpa.Spec{
			Max: 10, Target: 1, StableWindow: 6 * time.Second}})
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return a, srv
}

// push posts v as JSON to the server's path and returns the status and
// the answer.
func push(t *testing.T, srv *httptest.Server, path string, v any) (int, string) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// bufferedOf reads the buffered count of every function at now.
func bufferedOf(a *autoscaler.Autoscaler, now time.Time) map[string]int {
	out := map[string]int{}
	for _, s := range a.Scaling(now) {
		out[s.Name] = s.Buffered
	}
	return out
}

// What no one activator knows, the autoscaler answers for all of them: the
// requests waiting at every activator, added up, and its last decision,
// read by the activators' own client as their admin API does.
func TestScalingRoute(t *testing.T) {
	_, srv := pushServer(t, "b", "a")
	for _, rep := range []wire.BufferedReport{
		{Activator: "one", Functions: []wire.BufferedCount{{Namespace: "default", Name: "a", Count: 3}}},
		{Activator: "two", Functions: []wire.BufferedCount{{Namespace: "default", Name: "a", Count: 4}}},
	} {
		if code, answer := push(t, srv, wire.BufferedPath, rep); code != http.StatusNoContent {
			t.Fatalf("report %+v: %d %s", rep, code, answer)
		}
	}
	if code, answer := push(t, srv, wire.PokePath, wire.Poke{Namespace: "default", Name: "a"}); code != http.StatusNoContent {
		t.Fatalf("poke: %d %s", code, answer)
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

// One report carries an activator's counts of every function; each count
// is its own, cleared by a 0 and expiring when the activator stops
// renewing it, as when each function was reported alone.
func TestBufferedReportOfSeveralFunctions(t *testing.T) {
	a, srv := pushServer(t, "a", "b", "c")
	report := func(activator string, counts map[string]int) {
		t.Helper()
		rep := wire.BufferedReport{Activator: activator}
		for name, n := range counts {
			rep.Functions = append(rep.Functions, wire.BufferedCount{Namespace: "default", Name: name, Count: n})
		}
		if code, answer := push(t, srv, wire.BufferedPath, rep); code != http.StatusNoContent {
			t.Fatalf("report %+v: %d %s", rep, code, answer)
		}
	}
	report("one", map[string]int{"a": 3, "b": 5, "c": 1})
	afterFirst := time.Now()
	report("two", map[string]int{"a": 4})
	if got, want := bufferedOf(a, time.Now()), map[string]int{"a": 7, "b": 5, "c": 1}; !maps.Equal(got, want) {
		t.Fatalf("buffered %v, want %v", got, want)
	}
	// One's next report has a again, c gone (0), and no word of b: an
	// activator that stops reporting a function (cut off mid-way, or
	// restarted) leaves its count to expire.
	report("one", map[string]int{"a": 3, "c": 0})
	if got, want := bufferedOf(a, time.Now()), map[string]int{"a": 7, "b": 5, "c": 0}; !maps.Equal(got, want) {
		t.Fatalf("buffered %v after a 0 for c, want %v", got, want)
	}
	// BufferedTTL after the first report, its b has expired; the counts
	// of a, both reported after it, have not.
	if got, want := bufferedOf(a, afterFirst.Add(autoscaler.BufferedTTL)), map[string]int{"a": 7, "b": 0, "c": 0}; !maps.Equal(got, want) {
		t.Errorf("buffered %v once b's count is BufferedTTL old, want %v", got, want)
	}
	if got, want := bufferedOf(a, time.Now().Add(autoscaler.BufferedTTL)), map[string]int{"a": 0, "b": 0, "c": 0}; !maps.Equal(got, want) {
		t.Errorf("buffered %v once no report is renewed for BufferedTTL, want %v", got, want)
	}
}

// A report is checked whole before any of it is taken; a function the
// autoscaler does not scale is named, and does not keep the others out.
func TestBufferedReportRefusals(t *testing.T) {
	a, srv := pushServer(t, "a")
	tooMany := wire.BufferedReport{Activator: "one"}
	for range wire.MaxBufferedBatch + 1 {
		tooMany.Functions = append(tooMany.Functions, wire.BufferedCount{Namespace: "default", Name: "a", Count: 1})
	}
	tests := []struct {
		name   string
		report any
		code   int
		answer string
	}{
		{"a negative count", wire.BufferedReport{Activator: "one", Functions: []wire.BufferedCount{
			{Namespace: "default", Name: "a", Count: 9}, {Namespace: "default", Name: "a", Count: -1}}}, http.StatusBadRequest, "must not be negative"},
		{"an unknown field", map[string]any{"activator": "one", "namespace": "default", "name": "a", "count": 9}, http.StatusBadRequest, "malformed JSON"},
		{"too many functions", tooMany, http.StatusRequestEntityTooLarge, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, answer := push(t, srv, wire.BufferedPath, tt.report); code != tt.code || !strings.Contains(answer, tt.answer) {
				t.Errorf("%d %s, want %d with %q", code, answer, tt.code, tt.answer)
			}
			if got := bufferedOf(a, time.Now())["a"]; got != 0 {
				t.Errorf("a has %d waiting after a refused report, want 0", got)
			}
		})
	}

	code, answer := push(t, srv, wire.BufferedPath, wire.BufferedReport{Activator: "one", Functions: []wire.BufferedCount{
		{Namespace: "default", Name: "gone", Count: 2}, {Namespace: "default", Name: "a", Count: 3}}})
	if code != http.StatusNotFound || !strings.Contains(answer, "default/gone") {
		t.Errorf("a report with an unknown function: %d %s, want 404 naming default/gone", code, answer)
	}
	if got := bufferedOf(a, time.Now())["a"]; got != 3 {
		t.Errorf("a has %d waiting, want 3: an unknown function beside it must not keep it out", got)
	}
}
