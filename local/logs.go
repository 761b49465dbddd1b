package local

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Bounds of the output kept per function: the last maxLogLines lines, or
// fewer when they pass maxLogBytes; and the lines a follower may lag
// behind before lines are dropped for it.
const (
	maxLogLines   = 1000
	maxLogBytes   = 256 << 10
	followerQueue = 256
)

// LogLine is one line of an instance's output.
type LogLine struct {
	Time     time.Time `json:"time"`
	Instance string    `json:"instance"`
	Line     string    `json:"line"`
	// Dropped, on a followed stream, counts the lines left out before
	// this one because the follower read too slowly.
	Dropped int `json:"dropped,omitempty"`
}

// logs keeps each function's latest output lines for the admin API, and
// passes new ones to followers. add never blocks: the output copiers of
// the instances call it.
type logs struct {
	mu  sync.Mutex
	fns map[string]*functionLog
}

type functionLog struct {
	lines     []LogLine
	bytes     int
	followers map[*follower]struct{}
}

type follower struct {
	lines   chan LogLine
	dropped int // guarded by logs.mu
}

func (l *logs) get(key string) *functionLog {
	if l.fns == nil {
		l.fns = map[string]*functionLog{}
	}
	f := l.fns[key]
	if f == nil {
		f = &functionLog{followers: map[*follower]struct{}{}}
		l.fns[key] = f
	}
	return f
}

// add keeps a line of instance's output; it is the supervisor's Lines.
func (l *logs) add(namespace, name, instance, line string) {
	ll := LogLine{Time: time.Now(), Instance: instance, Line: line}
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.get(namespace + "/" + name)
	f.lines = append(f.lines, ll)
	f.bytes += len(line)
	for len(f.lines) > maxLogLines || f.bytes > maxLogBytes {
		f.bytes -= len(f.lines[0].Line)
		f.lines[0] = LogLine{}
		f.lines = f.lines[1:]
	}
	for fl := range f.followers {
		ll.Dropped = fl.dropped
		select {
		case fl.lines <- ll:
			fl.dropped = 0
		default:
			fl.dropped++
		}
	}
}

// forget drops a removed function's lines.
func (l *logs) forget(namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.fns[namespace+"/"+name]; f != nil && len(f.followers) == 0 {
		delete(l.fns, namespace+"/"+name)
	}
}

// tail returns up to n of the latest lines since a time (0: all kept).
func (l *logs) tail(namespace, name string, since time.Time, n int) []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tailLocked(namespace+"/"+name, since, n)
}

func (l *logs) tailLocked(key string, since time.Time, n int) []LogLine {
	f := l.get(key)
	out := []LogLine{}
	for _, ll := range f.lines {
		if !ll.Time.Before(since) {
			out = append(out, ll)
		}
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// follow returns the tail and a follower of the lines after it.
func (l *logs) follow(namespace, name string, since time.Time, n int) ([]LogLine, *follower, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := namespace + "/" + name
	fl := &follower{lines: make(chan LogLine, followerQueue)}
	l.get(key).followers[fl] = struct{}{}
	stop := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.get(key).followers, fl)
	}
	return l.tailLocked(key, since, n), fl, stop
}

// serveLogs answers GET .../logs?since=&tail=&follow=: the lines as JSON,
// or, following, one JSON object per line (newline-delimited), the tail
// first, until the client leaves.
func (p *Platform) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if _, ok := p.Function(ns, name); !ok {
		writeUnknown(w, r)
		return
	}
	v := r.URL.Query()
	var since time.Time
	if s := v.Get("since"); s != "" {
		d, err := time.ParseDuration(s)
		t, err2 := time.Parse(time.RFC3339Nano, s)
		switch {
		case err == nil && d > 0:
			since = time.Now().Add(-d)
		case err2 == nil:
			since = t
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "since must be a duration such as 5m or a time (RFC 3339)"})
			return
		}
	}
	n := 0
	if t := v.Get("tail"); t != "" {
		var err error
		if n, err = strconv.Atoi(t); err != nil || n < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "tail must be a positive whole number"})
			return
		}
	}
	if f := v.Get("follow"); f != "true" && f != "1" {
		writeJSON(w, http.StatusOK, map[string]any{"lines": p.logs.tail(ns, name, since, n)})
		return
	}
	tail, fl, stop := p.logs.follow(ns, name, since, n)
	defer stop()
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	for _, ll := range tail {
		_ = enc.Encode(ll)
	}
	flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ll := <-fl.lines:
			if enc.Encode(ll) != nil {
				return
			}
			flush()
		}
	}
}
