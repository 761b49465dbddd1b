package activator

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/invocation"
)

func TestMatch(t *testing.T) {
	var r routes
	hello := &route{fn: RouteSpec{Namespace: "ns", Name: "hello"}}
	r.update(func(r *routes) {
		r.byPath[types.NamespacedName{Namespace: "ns", Name: "hello"}], r.byHost["hello.ns"] = hello, hello
	})
	tests := []struct {
		uri, host, domain string
		want              *route
		rest              string
		ok                bool
	}{
		{"/fn/ns/hello/a/b?c=%2F", "", "", hello, "/a/b?c=%2F", true},
		{"/fn/ns/hello", "", "", hello, "/", true},
		{"/fn/ns/hello?x=1", "", "", hello, "/?x=1", true},
		{"/fn/ns/hello/", "", "", hello, "/", true},
		{"/fn/ns/hellothere", "", "", nil, "", true},
		{"/fn/ns", "", "", nil, "", true},
		{"/fn/", "", "", nil, "", true},
		{"/other", "hello.ns.example.com", "example.com", hello, "/other", true},
		{"/other", "hello.ns.example.com:8080", "example.com", hello, "/other", true},
		{"/other", "hello.ns.example.org", "example.com", nil, "", false},
		{"/other", "example.com", "example.com", nil, "", false},
		{"/other", "hello.ns.example.com", "", nil, "", false},
	}
	for _, tt := range tests {
		rt, rest, ok := r.match([]byte(tt.uri), []byte(tt.host), tt.domain)
		if rt != tt.want || ok != tt.ok || (rt != nil && string(rest) != tt.rest) {
			t.Errorf("match(%q, %q) = %v, %q, %v; want %v, %q, %v", tt.uri, tt.host, rt, rest, ok, tt.want, tt.rest, tt.ok)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	a, _ := New(Config{Domain: "example.com"}, nil, invocation.NewRing(1), prometheus.NewRegistry(), quiet)
	for i := range 1000 {
		a.SetFunction(RouteSpec{Namespace: "ns", Name: fmt.Sprint("fn", i), HTTP: true, Timeout: time.Second})
	}
	uri := []byte("/fn/ns/fn500/path?q=1")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rt, _, _ := a.routes.match(uri, nil, ""); rt == nil {
				b.Error("no route")
				return
			}
		}
	})
}

// BenchmarkIdleFunctionMemory registers b.N functions with no instance and
// reports the heap each one costs (goal: at most 8 KiB at 10,000).
func BenchmarkIdleFunctionMemory(b *testing.B) {
	a, _ := New(Config{}, nil, invocation.NewRing(1), prometheus.NewRegistry(), quiet)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range b.N {
		a.SetFunction(RouteSpec{Namespace: "ns", Name: fmt.Sprint("function-", i), HTTP: true, Timeout: time.Minute})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-bytes/function")
	runtime.KeepAlive(a)
}
