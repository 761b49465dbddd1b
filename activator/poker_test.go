package activator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHTTPPoker(t *testing.T) {
	got := make(chan map[string]string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]string
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- body
	}))
	defer srv.Close()
	p := &HTTPPoker{URL: srv.URL, Log: quiet}
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
