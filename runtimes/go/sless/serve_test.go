package sless

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// send sends one request to url and returns status, Content-Type and body.
func send(t *testing.T, method, url string, body io.Reader) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(data)
}

func TestResults(t *testing.T) {
	type point struct {
		X int `json:"x"`
	}
	tests := []struct {
		name       string
		result     any
		err        error
		panicWith  any
		wantStatus int
		wantType   string
		wantBody   string
	}{
		{name: "map", result: map[string]int{"a": 1}, wantStatus: 200, wantType: "application/json", wantBody: `{"a":1}`},
		{name: "struct", result: point{X: 2}, wantStatus: 200, wantType: "application/json", wantBody: `{"x":2}`},
		{name: "slice", result: []int{1, 2}, wantStatus: 200, wantType: "application/json", wantBody: `[1,2]`},
		{name: "number", result: 42, wantStatus: 200, wantType: "application/json", wantBody: `42`},
		{name: "string", result: "hello", wantStatus: 200, wantType: "text/plain; charset=utf-8", wantBody: "hello"},
		{name: "html", result: "<p>hi</p>", wantStatus: 200, wantType: "text/html; charset=utf-8", wantBody: "<p>hi</p>"},
		{name: "bytes", result: []byte{0, 1, 2}, wantStatus: 200, wantType: "application/octet-stream", wantBody: "\x00\x01\x02"},
		{name: "nil", result: nil, wantStatus: 204, wantBody: ""},
		{name: "error", err: errors.New("no such order"), wantStatus: 500, wantType: "application/json", wantBody: `{"error":"no such order"}`},
		{name: "error wins over result", result: "ignored", err: errors.New("boom"), wantStatus: 500, wantType: "application/json", wantBody: `{"error":"boom"}`},
		{name: "panic", panicWith: "nil map", wantStatus: 500, wantType: "application/json", wantBody: `{"error":"panic: nil map"}`},
		{name: "not JSON", result: make(chan int), wantStatus: 500, wantType: "application/json", wantBody: `{"error":"encode result as JSON: json: unsupported type: chan int"}`},
		{name: "reader", result: strings.NewReader("streamed"), wantStatus: 200, wantType: "application/octet-stream", wantBody: "streamed"},
		{name: "response", result: &Response{Status: 404, Body: map[string]string{"error": "no such order"}},
			wantStatus: 404, wantType: "application/json", wantBody: `{"error":"no such order"}`},
		{name: "response value", result: Response{Status: 201, Body: "created"}, wantStatus: 201, wantType: "text/plain; charset=utf-8", wantBody: "created"},
		{name: "response's own type", result: &Response{Header: http.Header{"Content-Type": {"image/png"}}, Body: []byte{0x89, 'P', 'N', 'G'}},
			wantStatus: 200, wantType: "image/png", wantBody: "\x89PNG"},
		{name: "response streamed", result: &Response{Status: 202, Header: http.Header{"Content-Type": {"text/csv"}}, Body: strings.NewReader("a,b\n")},
			wantStatus: 202, wantType: "text/csv", wantBody: "a,b\n"},
		{name: "response without a body", result: &Response{Status: 201}, wantStatus: 201, wantBody: ""},
		{name: "empty response", result: &Response{}, wantStatus: 204, wantBody: ""},
		{name: "nil response", result: (*Response)(nil), wantStatus: 204, wantBody: ""},
		{name: "response status out of range", result: &Response{Status: 42, Body: "x"}, wantStatus: 500, wantType: "application/json",
			wantBody: `{"error":"response status 42: want 200 to 599"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(server{maxBody: maxBodyBytes, h: func(context.Context, Event) (any, error) {
				if tt.panicWith != nil {
					panic(tt.panicWith)
				}
				return tt.result, tt.err
			}})
			defer srv.Close()
			status, contentType, body := send(t, http.MethodGet, srv.URL+"/x", nil)
			if status != tt.wantStatus || contentType != tt.wantType || body != tt.wantBody {
				t.Errorf("got %d %q %q, want %d %q %q", status, contentType, body, tt.wantStatus, tt.wantType, tt.wantBody)
			}
		})
	}
}

func TestPanicKeepsServing(t *testing.T) {
	srv := httptest.NewServer(server{maxBody: maxBodyBytes, h: func(_ context.Context, e Event) (any, error) {
		if e.Path == "/panic" {
			var empty []string
			return empty[len(e.Path)], nil
		}
		return "fine", nil
	}})
	defer srv.Close()
	if status, _, body := send(t, http.MethodGet, srv.URL+"/panic", nil); status != 500 || !strings.Contains(body, "index out of range [6] with length 0") {
		t.Fatalf("panicking handler answered %d %s, want 500 naming the panic", status, body)
	}
	if status, _, body := send(t, http.MethodGet, srv.URL+"/next", nil); status != 200 || body != "fine" {
		t.Fatalf("request after a panic answered %d %q, want 200 fine", status, body)
	}
}

func TestEvent(t *testing.T) {
	events := make(chan Event, 1)
	srv := httptest.NewServer(server{maxBody: maxBodyBytes, h: func(_ context.Context, e Event) (any, error) {
		events <- e
		return nil, nil
	}})
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders/7?id=1&id=2&q=a+b&flag", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("X-Tag", "a")
	req.Header.Add("X-Tag", "b")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := <-events
	want := Event{
		Method: "POST",
		Path:   "/orders/7",
		Query:  map[string]string{"id": "1", "q": "a b", "flag": ""},
		Body:   []byte(`{"n":1}`),
	}
	if got.Method != want.Method || got.Path != want.Path || !reflect.DeepEqual(got.Query, want.Query) || string(got.Body) != string(want.Body) {
		t.Errorf("event = %+v, want %+v", got, want)
	}
	for name, value := range map[string]string{
		"x-tag":          "a, b",
		"content-type":   "application/json",
		"content-length": "7",
		"host":           strings.TrimPrefix(srv.URL, "http://"),
	} {
		if got.Headers[name] != value {
			t.Errorf("header %s = %q, want %q (all: %v)", name, got.Headers[name], value, got.Headers)
		}
	}
}

func TestEventJSON(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"text body", []byte("hi"), `{"method":"GET","path":"/","query":{"a":"1"},"headers":{"x":"y"},"body":"hi","isBase64Encoded":false}`},
		{"empty body", nil, `{"method":"GET","path":"/","query":{"a":"1"},"headers":{"x":"y"},"body":"","isBase64Encoded":false}`},
		{"binary body", []byte{0xff, 0}, `{"method":"GET","path":"/","query":{"a":"1"},"headers":{"x":"y"},"body":"/wA=","isBase64Encoded":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Event{Method: "GET", Path: "/", Query: map[string]string{"a": "1"}, Headers: map[string]string{"x": "y"}, Body: tt.body}
			data, err := json.Marshal(e)
			if err != nil || string(data) != tt.want {
				t.Fatalf("event JSON = %s (%v), want %s", data, err, tt.want)
			}
			var back Event
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if back.Method != e.Method || back.Path != e.Path || !reflect.DeepEqual(back.Query, e.Query) ||
				!reflect.DeepEqual(back.Headers, e.Headers) || string(back.Body) != string(e.Body) {
				t.Errorf("event read back = %+v, want %+v", back, e)
			}
		})
	}
	var e Event
	if err := json.Unmarshal([]byte(`{"body":"%%%","isBase64Encoded":true}`), &e); err == nil {
		t.Error("event with a body that is not base64 was read without an error")
	}
}

func TestHealthz(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(healthz{server{maxBody: maxBodyBytes, h: func(context.Context, Event) (any, error) {
		calls.Add(1)
		return "handler", nil
	}}})
	defer srv.Close()
	if status, _, body := send(t, http.MethodGet, srv.URL+"/healthz", nil); status != 200 || body != "ok" || calls.Load() != 0 {
		t.Errorf("GET /healthz = %d %q after %d handler calls, want 200 ok without a call", status, body, calls.Load())
	}
	if status, _, body := send(t, http.MethodPost, srv.URL+"/healthz", nil); status != 200 || body != "handler" || calls.Load() != 1 {
		t.Errorf("POST /healthz = %d %q after %d handler calls, want the handler's answer", status, body, calls.Load())
	}
}

func TestBodyTooLarge(t *testing.T) {
	srv := httptest.NewServer(server{maxBody: 10, h: func(context.Context, Event) (any, error) {
		t.Error("handler called with an oversized body")
		return nil, nil
	}})
	defer srv.Close()
	status, _, body := send(t, http.MethodPost, srv.URL+"/", strings.NewReader("0123456789X"))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "request body over") {
		t.Errorf("oversized body answered %d %s, want 413", status, body)
	}
}

func TestContextEndsWhenCallerLeaves(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	srv := httptest.NewServer(server{maxBody: maxBodyBytes, h: func(ctx context.Context, _ Event) (any, error) {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	}})
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-started
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request succeeded after the caller cancelled it")
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handler context ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler context did not end after the caller left")
	}
}

func TestShutdownFinishesInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, ln, server{maxBody: maxBodyBytes, h: func(context.Context, Event) (any, error) {
			close(started)
			<-release
			return "done", nil
		}})
	}()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/work")
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- string(body)
	}()
	<-started
	stop()
	// Shutdown closes the listener first: wait for that, then let the
	// request in flight finish.
	if !closedWithin(30*time.Second, ln.Addr().String()) {
		t.Fatal("listener still open after shutdown began")
	}
	close(release)
	if body := <-answered; body != "done" {
		t.Errorf("request in flight during shutdown answered %q, want done", body)
	}
	if err := <-served; err != nil {
		t.Errorf("serve after graceful shutdown = %v, want nil", err)
	}
}

func TestRunFailsClearly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, port, _ := net.SplitHostPort(taken.Addr().String())
	tests := []struct{ port, want string }{
		{"", "PORT is not set"},
		{port, "address already in use"},
	}
	for _, tt := range tests {
		t.Setenv("PORT", tt.port)
		if err := run(nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run with PORT=%q = %v, want an error containing %q", tt.port, err, tt.want)
		}
	}
}

// closedWithin polls until addr refuses connections or within passes. The
// SDK is a module of its own, standard library only, so its tests cannot
// use sless's internal/eventually: this is its one poll.
func closedWithin(within time.Duration, addr string) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		conn.Close()
		if time.Now().After(deadline) {
			return false
		}
	}
}
