package local

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/invocation"
)

// Bounds of the output kept per function: the last maxLogLines lines, or
// fewer when their text passes maxLogBytes (a line is at most 4 KiB, the
// supervisor's cut); and the lines a follower may lag behind before lines
// are dropped for it.
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
	// this one because the follower read too slowly. A line that only
	// reports them has no instance and no text.
	Dropped int `json:"dropped,omitempty"`
	// Removed, the last line of a followed stream, says the function was
	// removed: no line will come.
	Removed bool `json:"removed,omitempty"`
}

// logs keeps each function's latest output lines for the admin API (at
// most maxLogLines lines and maxLogBytes of text per function), and passes
// new ones to followers. add never blocks: the output copiers of the
// instances call it; a follower that lags more than followerQueue lines
// loses the next ones and is told how many with the line after them, or,
// when none comes (the burst ended), as soon as it has read its queue.
type logs struct {
	mu  sync.Mutex
	fns map[types.NamespacedName]*functionLog
}

type functionLog struct {
	lines     []LogLine
	bytes     int
	followers map[*follower]struct{}
}

type follower struct {
	lines chan LogLine
	// gap is signalled when a line is dropped, so that the stream says so
	// once it has read what came before, without waiting for a next line.
	gap     chan struct{}
	dropped int // guarded by logs.mu
	// removed is closed when the function is removed.
	removed chan struct{}
}

// get returns key's log, made when missing. Called with l.mu held.
func (l *logs) get(key types.NamespacedName) *functionLog {
	if l.fns == nil {
		l.fns = map[types.NamespacedName]*functionLog{}
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
	f := l.get(types.NamespacedName{Namespace: namespace, Name: name})
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
			select {
			case fl.gap <- struct{}{}:
			default: // already signalled
			}
		}
	}
}

// takeDropped returns, and resets, the lines fl lost since the last it
// was given, once it has read every line queued before them; ok is false
// while some are left to read.
func (l *logs) takeDropped(fl *follower) (n int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(fl.lines) > 0 {
		return 0, false
	}
	n, fl.dropped = fl.dropped, 0
	return n, true
}

// forget drops a removed function's lines, and tells its followers, whose
// streams end saying so: a follower would otherwise wait on in silence.
func (l *logs) forget(namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if f := l.fns[key]; f != nil {
		for fl := range f.followers {
			close(fl.removed)
		}
		f.lines, f.bytes, f.followers = nil, 0, map[*follower]struct{}{}
		l.dropIfEmpty(key, f)
	}
}

// dropIfEmpty forgets f when it keeps nothing. Called with l.mu held.
func (l *logs) dropIfEmpty(key types.NamespacedName, f *functionLog) {
	if len(f.lines) == 0 && len(f.followers) == 0 {
		delete(l.fns, key)
	}
}

// allLines is a tail of every line kept.
const allLines = -1

// tail returns up to n of the latest lines since a time (allLines: every
// one kept; 0: none), oldest first.
func (l *logs) tail(namespace, name string, since time.Time, n int) []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tailLocked(types.NamespacedName{Namespace: namespace, Name: name}, since, n)
}

func (l *logs) tailLocked(key types.NamespacedName, since time.Time, n int) []LogLine {
	out := []LogLine{}
	f := l.fns[key]
	if f == nil {
		return out
	}
	for _, ll := range f.lines {
		if !ll.Time.Before(since) {
			out = append(out, ll)
		}
	}
	if n >= 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// follow returns the tail and a follower of the lines after it, neither
// missing nor repeating one; stop ends the following.
func (l *logs) follow(namespace, name string, since time.Time, n int) (tail []LogLine, fl *follower, stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := types.NamespacedName{Namespace: namespace, Name: name}
	fl = &follower{lines: make(chan LogLine, followerQueue), gap: make(chan struct{}, 1), removed: make(chan struct{})}
	l.get(key).followers[fl] = struct{}{}
	stop = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if f := l.fns[key]; f != nil {
			delete(f.followers, fl)
			l.dropIfEmpty(key, f)
		}
	}
	return l.tailLocked(key, since, n), fl, stop
}

// logsQuery is what a logs request asks for.
type logsQuery struct {
	since  time.Time
	tail   int // allLines when not asked
	follow bool
}

// parseLogsQuery reads ?since=<duration or RFC 3339>&tail=N&follow=true;
// tail=0 asks for none of the kept lines: with follow, only new ones.
func parseLogsQuery(r *http.Request, now time.Time) (logsQuery, error) {
	v := r.URL.Query()
	q := logsQuery{tail: allLines}
	if s := v.Get("since"); s != "" {
		var err error
		if q.since, err = invocation.ParseSince(s, now); err != nil {
			return q, err
		}
	}
	if t := v.Get("tail"); t != "" {
		var err error
		if q.tail, err = strconv.Atoi(t); err != nil || q.tail < 0 {
			return q, errors.New("tail must be a whole number, 0 or more, not " + strconv.Quote(t))
		}
	}
	if f := v.Get("follow"); f != "" {
		var err error
		if q.follow, err = strconv.ParseBool(f); err != nil {
			return q, errors.New("follow must be true or false, not " + strconv.Quote(f))
		}
	}
	return q, nil
}

// streamEnd writes the lines fl still has queued, then the line saying
// the function was removed.
func (l *logs) streamEnd(enc *json.Encoder, fl *follower) {
	for {
		select {
		case ll := <-fl.lines:
			if enc.Encode(ll) != nil {
				return
			}
		default:
			_ = enc.Encode(LogLine{Time: time.Now(), Removed: true})
			return
		}
	}
}

// serveLogs answers GET .../logs?since=&tail=&follow=: {"lines":[...]},
// or, following, one JSON object per line (newline-delimited), the tail
// first, until the client leaves or the admin server closes.
func (p *Platform) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if _, ok := p.Function(ns, name); !ok {
		writeUnknown(w, r)
		return
	}
	q, err := parseLogsQuery(r, time.Now())
	if err != nil {
		adminapi.WriteError(w, adminapi.BadInput("%v", err))
		return
	}
	if !q.follow {
		httpjson.Write(w, http.StatusOK, map[string]any{"lines": p.logs.tail(ns, name, q.since, q.tail)})
		return
	}
	p.logs.stream(w, r, ns, name, q)
}

// stream follows a function's lines onto w, flushing each, until r's
// context ends (the client left, or the server closed its connection) or
// a write fails. Lines dropped at the end of a burst are reported by a
// line of their own (no instance, no text, "dropped": N) once the queue
// before them is written.
func (l *logs) stream(w http.ResponseWriter, r *http.Request, ns, name string, q logsQuery) {
	tail, fl, stop := l.follow(ns, name, q.since, q.tail)
	defer stop()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	for _, ll := range tail {
		if enc.Encode(ll) != nil {
			return
		}
	}
	flush()
	gap := false // lines were dropped and not yet reported
	for {
		select {
		case <-r.Context().Done():
			return
		case ll := <-fl.lines:
			if enc.Encode(ll) != nil {
				return
			}
			flush()
		case <-fl.gap:
			gap = true
		case <-fl.removed:
			l.streamEnd(enc, fl)
			flush()
			return
		}
		if !gap || len(fl.lines) > 0 {
			continue
		}
		n, ok := l.takeDropped(fl)
		gap = !ok
		if n > 0 {
			if enc.Encode(LogLine{Time: time.Now(), Dropped: n}) != nil {
				return
			}
			flush()
		}
	}
}
