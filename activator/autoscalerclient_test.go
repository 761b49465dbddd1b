package activator

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The autoscaler's side of these calls is tested in the autoscaler package;
// here a server records what the client sends.
func TestAutoscalerClientPokes(t *testing.T) {
	got := make(chan map[string]string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]string
		_ = json.NewDecoder(r.Body).Decode(&body)
		if r.URL.Path != "/v1/poke" {
			t.Errorf("poke sent to %s", r.URL.Path)
		}
		got <- body
	}))
	defer srv.Close()
	p := &AutoscalerClient{BaseURL: srv.URL, Log: quiet}
	p.Poke("ns", "a")
	p.Poke("ns", "a") // merged with the first while it is queued
	p.Poke("ns", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	first, second := <-got, <-got
	if first["name"] != "a" || second["name"] != "b" || first["namespace"] != "ns" {
		t.Errorf("pokes %v then %v, want a then b in ns", first, second)
	}
	select {
	case extra := <-got:
		t.Errorf("extra poke %v: repeated pokes while queued must merge", extra)
	default:
	}
}

type bufferedCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (b *bufferedCounts) Buffered() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

func (b *bufferedCounts) set(m map[string]int) {
	b.mu.Lock()
	b.m = m
	b.mu.Unlock()
}

func TestAutoscalerClientReportsBuffered(t *testing.T) {
	type report struct {
		Namespace, Name, Activator string
		Count                      int
	}
	got := make(chan report, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		if r.URL.Path == "/v1/buffered" {
			got <- rep
		}
	}))
	defer srv.Close()
	src := &bufferedCounts{m: map[string]int{"ns/a": 3}}
	p := &AutoscalerClient{BaseURL: srv.URL + "/", ID: "activator-7", Log: quiet}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.ReportBuffered(ctx, src, 10*time.Millisecond)
	if r := <-got; r != (report{"ns", "a", "activator-7", 3}) {
		t.Fatalf("first report %+v, want ns/a 3 from activator-7", r)
	}
	src.set(map[string]int{})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			if r.Count != 0 {
				continue // a report from before the change
			}
			if r.Namespace != "ns" || r.Name != "a" {
				t.Fatalf("zero report %+v, want ns/a", r)
			}
			return
		case <-deadline:
			t.Fatal("no report of 0 after the requests left")
		}
	}
}
