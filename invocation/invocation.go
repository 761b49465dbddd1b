// Package invocation holds the record every invocation leaves behind, and
// the in-memory ring that keeps the latest ones when no database is
// configured.
package invocation

import (
	"sync"
	"time"
	"unicode/utf8"
)

// MaxErrorBytes bounds a record's Error, so that a record's size is
// bounded whatever failed.
const MaxErrorBytes = 1024

// Record is one invocation of a function.
type Record struct {
	// ID orders records: the store that keeps a record numbers it, in
	// the order records reach it.
	ID        int64  `json:"id"`
	Namespace string `json:"namespace"`
	Function  string `json:"function"`
	// Trigger is the kind of trigger that invoked: http, cron or
	// rabbitmq; TriggerName names it in the Function (empty for http).
	Trigger     string `json:"trigger"`
	TriggerName string `json:"triggerName,omitempty"`
	// RequestID is the X-Request-Id the function saw, to find the
	// invocation in the function's own logs.
	RequestID string `json:"requestId,omitempty"`
	// Status is the HTTP status code answered (499: the client left).
	Status int       `json:"status"`
	Start  time.Time `json:"start"`
	// Duration is from arrival to answer, waiting included.
	Duration time.Duration `json:"durationNs"`
	// QueueWait is how long the invocation waited for an instance with
	// room; ColdStart is set when it waited for a function with no
	// instance, and ColdStartWait is then that wait.
	QueueWait     time.Duration `json:"queueWaitNs,omitempty"`
	ColdStart     bool          `json:"coldStart"`
	ColdStartWait time.Duration `json:"coldStartWaitNs,omitempty"`
	// BytesIn and BytesOut are the body sizes, when known (-1: chunked or
	// streamed without a length).
	BytesIn  int `json:"bytesIn"`
	BytesOut int `json:"bytesOut"`
	// Instance is the instance that served it (for HTTP, its queue-proxy's
	// address), empty when none did.
	Instance string `json:"instance,omitempty"`
	// Error is why the platform failed it, up to MaxErrorBytes: empty
	// when the function answered.
	Error string `json:"error,omitempty"`
}

// TruncateError bounds an error text to MaxErrorBytes, on a rune boundary.
func TruncateError(msg string) string {
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// Sink takes invocation records: the activator's of every invocation, a
// queue-proxy's of every message it consumed, on their way to a store (the
// Ring, or PostgreSQL) and the activator's timeline. Add must not block:
// the request path calls it.
type Sink interface {
	Add(Record)
}

// Ring keeps the latest records in a fixed amount of memory: adding never
// blocks on anything but a short critical section, and the oldest record
// makes room for the newest.
type Ring struct {
	mu    sync.Mutex
	buf   []Record
	next  int
	total uint64
}

// NewRing returns a ring holding up to size records.
func NewRing(size int) *Ring { return &Ring{buf: make([]Record, max(size, 1))} }

// Add keeps r, numbered in the order records are added.
func (g *Ring) Add(r Record) {
	g.mu.Lock()
	g.total++
	r.ID = int64(g.total)
	g.buf[g.next] = r
	g.next = (g.next + 1) % len(g.buf)
	g.mu.Unlock()
}

// each calls f with every record held, under the ring's lock.
func (g *Ring) each(f func(Record)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range int(min(g.total, uint64(len(g.buf)))) {
		f(g.buf[i])
	}
}

// Recent returns up to n records, newest first, and the number ever added.
func (g *Ring) Recent(n int) ([]Record, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n = min(n, len(g.buf), int(min(g.total, uint64(len(g.buf)))))
	out := make([]Record, 0, n)
	for i := range n {
		out = append(out, g.buf[(g.next-1-i+2*len(g.buf))%len(g.buf)])
	}
	return out, g.total
}
