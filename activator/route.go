package activator

import (
	"bytes"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/runs"
)

// RouteSpec is what the activator knows of one function.
type RouteSpec struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// HTTP is false for functions without an HTTP trigger: they are not
	// served, as if unknown.
	HTTP bool `json:"http"`
	// DisabledHTTP names the HTTP trigger when it is enabled: false: its
	// requests get a 404 that says so.
	DisabledHTTP string `json:"disabledHttp,omitempty"`
	// Concurrency is the per-instance limit (0: unlimited).
	Concurrency int `json:"concurrency"`
	// Timeout bounds the wait for an answer to start, waiting for an
	// instance included.
	Timeout time.Duration `json:"timeoutNs"`
	// IdleTimeout bounds the silence between a streamed answer's bytes
	// (0: none); MaxDuration bounds a request whole (at least Timeout).
	IdleTimeout time.Duration `json:"idleTimeoutNs,omitempty"`
	MaxDuration time.Duration `json:"maxDurationNs,omitempty"`
	// Triggers are the function's triggers by name, which the fire route
	// checks: it fires an enabled cron trigger only.
	Triggers map[string]Trigger `json:"triggers,omitempty"`
	// Runs is how the function's runs are attempted.
	Runs runs.Policy `json:"runs"`
}

// Trigger is one of a function's triggers, as the fire route sees it.
type Trigger struct {
	Cron    bool `json:"cron"`
	Enabled bool `json:"enabled"`
}

// route is a function with its throttler, as the request path sees it.
type route struct {
	fn        RouteSpec
	throttler *Throttler
	metrics   *routeMetrics
	// prefix is the path prefix requests routed by path come in under,
	// /fn/<namespace>/<name>, kept to tell the function without building
	// it for each request.
	prefix string
}

// routes maps requests to functions. Lookups take the read lock: a few
// nanoseconds, no allocation, and writes (functions changing) cost O(1)
// even when a watch lists ten thousand functions at start.
type routes struct {
	mu     sync.RWMutex
	byPath map[types.NamespacedName]*route
	byHost map[string]*route // "name.namespace"
}

// update applies change under the write lock.
func (r *routes) update(change func(r *routes)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byPath == nil {
		r.byPath, r.byHost = map[types.NamespacedName]*route{}, map[string]*route{}
	}
	change(r)
}

func (r *routes) get(namespace, name string) *route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byPath[types.NamespacedName{Namespace: namespace, Name: name}]
}

// all returns every route.
func (r *routes) all() []*route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*route, 0, len(r.byPath))
	for _, rt := range r.byPath {
		out = append(out, rt)
	}
	return out
}

// match finds the function a request is for, from its path
// /fn/<namespace>/<name>[/<rest>] or its host <name>.<namespace>.<domain>,
// and returns the path the function sees. domain is "" when host routing
// is off. path is the raw request URI, query included, so that the
// function sees it byte for byte. No allocation but for a request to a
// function's root: map lookups with converted byte slices do not copy,
// in a struct key as in a string one.
func (r *routes) match(path, host []byte, domain string) (rt *route, rest []byte, ok bool) {
	if p, found := bytes.CutPrefix(path, []byte("/fn/")); found {
		// p is <namespace>/<name>[/<rest>][?<query>]
		end := bytes.IndexByte(p, '?')
		if end < 0 {
			end = len(p)
		}
		ns, after, named := bytes.Cut(p[:end], []byte("/"))
		name, _, _ := bytes.Cut(after, []byte("/"))
		keyLen := min(len(ns)+1+len(name), end)
		rest = p[keyLen:]
		if len(rest) == 0 || rest[0] == '?' {
			// The function's root: the query follows "/". Only here
			// does the activator build a new request URI.
			rest = append([]byte("/"), rest...)
		}
		if !named { // /fn/<namespace>: no function
			return nil, rest, true
		}
		r.mu.RLock()
		rt = r.byPath[types.NamespacedName{Namespace: string(ns), Name: string(name)}]
		r.mu.RUnlock()
		return rt, rest, true
	}
	if domain == "" {
		return nil, nil, false
	}
	host, _, _ = bytes.Cut(host, []byte(":"))
	prefix, found := bytes.CutSuffix(host, []byte(domain))
	if !found || len(prefix) < 2 || prefix[len(prefix)-1] != '.' {
		return nil, nil, false
	}
	r.mu.RLock()
	rt = r.byHost[string(prefix[:len(prefix)-1])]
	r.mu.RUnlock()
	return rt, path, true
}
