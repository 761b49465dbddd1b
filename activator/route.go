package activator

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// Function is what the activator knows of one function.
type Function struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// HTTP is false for functions without an HTTP trigger: they are not
	// served, as if unknown.
	HTTP bool `json:"http"`
	// Concurrency is the per-instance limit (0: unlimited).
	Concurrency int `json:"concurrency"`
	// Timeout bounds a request, waiting included.
	Timeout time.Duration `json:"timeoutNs"`
}

// route is a function with its throttler, as the request path sees it.
type route struct {
	fn        Function
	throttler *Throttler
	metrics   *routeMetrics
}

// routes maps requests to functions. Reads take no lock: the tables are
// replaced whole on change, which is rare next to requests.
type routes struct {
	mu     sync.Mutex // serialises writers
	tables atomic.Pointer[routeTables]
}

type routeTables struct {
	byPath map[string]*route // "namespace/name"
	byHost map[string]*route // "name.namespace"
}

func (r *routes) load() *routeTables {
	if t := r.tables.Load(); t != nil {
		return t
	}
	return &routeTables{}
}

// update applies change to a copy of the tables and publishes it.
func (r *routes) update(change func(t *routeTables)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.load()
	t := &routeTables{byPath: make(map[string]*route, len(old.byPath)+1), byHost: make(map[string]*route, len(old.byHost)+1)}
	for k, v := range old.byPath {
		t.byPath[k] = v
	}
	for k, v := range old.byHost {
		t.byHost[k] = v
	}
	change(t)
	r.tables.Store(t)
}

func (r *routes) get(namespace, name string) *route {
	return r.load().byPath[namespace+"/"+name]
}

// match finds the function a request is for, from its path
// /fn/<namespace>/<name>[/<rest>] or its host <name>.<namespace>.<domain>,
// and returns the path the function sees. domain is "" when host routing
// is off. path is the raw request URI, query included, so that the
// function sees it byte for byte. No allocation but for a request to a
// function's root: map lookups with converted byte slices do not copy.
func (r *routes) match(path, host []byte, domain string) (rt *route, rest []byte, ok bool) {
	t := r.load()
	if p, found := bytes.CutPrefix(path, []byte("/fn/")); found {
		// p is <namespace>/<name>[/<rest>][?<query>]
		end := bytes.IndexByte(p, '?')
		if end < 0 {
			end = len(p)
		}
		ns, after, _ := bytes.Cut(p[:end], []byte("/"))
		name, _, _ := bytes.Cut(after, []byte("/"))
		keyLen := min(len(ns)+1+len(name), end)
		rest = p[keyLen:]
		if len(rest) == 0 || rest[0] == '?' {
			// The function's root: the query follows "/". Only here
			// does the activator build a new request URI.
			rest = append([]byte("/"), rest...)
		}
		return t.byPath[string(p[:keyLen])], rest, true
	}
	if domain == "" {
		return nil, nil, false
	}
	host, _, _ = bytes.Cut(host, []byte(":"))
	prefix, found := bytes.CutSuffix(host, []byte(domain))
	if !found || len(prefix) < 2 || prefix[len(prefix)-1] != '.' {
		return nil, nil, false
	}
	return t.byHost[string(prefix[:len(prefix)-1])], path, true
}
