package invocation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Query selects one function's records for a page of its history, newest
// first: by start time, then by ID.
type Query struct {
	Namespace, Function string
	// Limit bounds the page (1 to MaxLimit).
	Limit int
	// Before, when set, is the previous page's Next: the page starts
	// after the last record it ended with.
	Before *Cursor
	// Since, when set, leaves out records that started before it.
	Since time.Time
	// Status and Trigger, when set, keep only the records with them.
	Status  int
	Trigger string
}

// Bounds of a page.
const (
	DefaultLimit = 100
	MaxLimit     = 10_000
)

// Cursor is a position in a function's history: a keyset, so that records
// arriving while a client pages never shift the pages.
type Cursor struct {
	Start time.Time
	ID    int64
}

// String encodes the cursor for an API answer.
func (c Cursor) String() string {
	return strconv.FormatInt(c.Start.UnixNano(), 10) + "." + strconv.FormatInt(c.ID, 10)
}

// ParseCursor decodes a Cursor's String.
func ParseCursor(s string) (Cursor, error) {
	ns, id, ok := strings.Cut(s, ".")
	n, err1 := strconv.ParseInt(ns, 10, 64)
	i, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Cursor{}, fmt.Errorf("bad cursor %q: pass the next of an earlier page", s)
	}
	return Cursor{Start: time.Unix(0, n).UTC(), ID: i}, nil
}

// after reports whether r comes after c, newest first.
func (c Cursor) after(r Record) bool {
	return r.Start.Before(c.Start) || r.Start.Equal(c.Start) && r.ID < c.ID
}

// Page is one page of a function's history.
type Page struct {
	Invocations []Record `json:"invocations"`
	// Next is the cursor of the next page, empty on the last one.
	Next string `json:"next,omitempty"`
}

// Summary is how a function did over a window, in all and by trigger.
type Summary struct {
	Namespace string         `json:"namespace"`
	Function  string         `json:"function"`
	Since     time.Time      `json:"since"`
	Window    string         `json:"window"`
	Total     TriggerSummary `json:"total"`
	// Triggers are sorted by trigger.
	Triggers []TriggerSummary `json:"triggers"`
}

// TriggerSummary is the summary of one trigger's invocations, or of all.
// Errors are answers of 500 and above: a client's fault is not the
// function's.
type TriggerSummary struct {
	Trigger   string  `json:"trigger,omitempty"`
	Count     int64   `json:"count"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"errorRate"`
	P50Ms     float64 `json:"p50Ms"`
	P95Ms     float64 `json:"p95Ms"`
	P99Ms     float64 `json:"p99Ms"`
	// ColdStarts counts the invocations that waited for a start from
	// zero; ColdStartWaitP50Ms is their median wait.
	ColdStarts         int64   `json:"coldStarts"`
	ColdStartWaitP50Ms float64 `json:"coldStartWaitP50Ms"`
}

// Check validates a query, applying DefaultLimit.
func (q *Query) Check() error {
	if q.Limit == 0 {
		q.Limit = DefaultLimit
	}
	if q.Limit < 1 || q.Limit > MaxLimit {
		return fmt.Errorf("limit must be from 1 to %d", MaxLimit)
	}
	return nil
}

// keep reports whether r answers q, but for the cursor.
func (q Query) keep(r Record) bool {
	return r.Namespace == q.Namespace && r.Function == q.Function &&
		(q.Since.IsZero() || !r.Start.Before(q.Since)) &&
		(q.Status == 0 || r.Status == q.Status) && (q.Trigger == "" || r.Trigger == q.Trigger)
}

// PageOf makes the page of records, sorted newest first, one more than
// the limit when there is a next page.
func PageOf(records []Record, limit int) Page {
	p := Page{Invocations: records}
	if len(records) > limit {
		p.Invocations = records[:limit]
		last := records[limit-1]
		p.Next = Cursor{Start: last.Start, ID: last.ID}.String()
	}
	return p
}

// List answers q from the records the ring holds.
func (g *Ring) List(_ context.Context, q Query) (Page, error) {
	if err := q.Check(); err != nil {
		return Page{}, err
	}
	var out []Record
	g.each(func(r Record) {
		if q.keep(r) && (q.Before == nil || q.Before.after(r)) {
			out = append(out, r)
		}
	})
	slices.SortFunc(out, newestFirst)
	return PageOf(out[:min(len(out), q.Limit+1)], q.Limit), nil
}

func newestFirst(a, b Record) int {
	return cmp.Or(b.Start.Compare(a.Start), cmp.Compare(b.ID, a.ID))
}

// Summary sums up what the ring holds of a function since a time.
func (g *Ring) Summary(_ context.Context, namespace, function string, since time.Time) (Summary, error) {
	q := Query{Namespace: namespace, Function: function, Since: since}
	byTrigger := map[string][]Record{}
	var all []Record
	g.each(func(r Record) {
		if q.keep(r) {
			byTrigger[r.Trigger] = append(byTrigger[r.Trigger], r)
			all = append(all, r)
		}
	})
	s := Summary{Namespace: namespace, Function: function, Since: since, Total: summarize("", all), Triggers: []TriggerSummary{}}
	for _, t := range slices.Sorted(maps.Keys(byTrigger)) {
		s.Triggers = append(s.Triggers, summarize(t, byTrigger[t]))
	}
	return s, nil
}

// summarize computes a TriggerSummary with percentiles interpolated as
// PostgreSQL's percentile_cont does, so that both stores agree.
func summarize(trigger string, rs []Record) TriggerSummary {
	s := TriggerSummary{Trigger: trigger, Count: int64(len(rs))}
	durations := make([]float64, 0, len(rs))
	var waits []float64
	for _, r := range rs {
		if r.Status >= 500 {
			s.Errors++
		}
		durations = append(durations, ms(r.Duration))
		if r.ColdStart {
			s.ColdStarts++
			waits = append(waits, ms(r.ColdStartWait))
		}
	}
	if s.Count > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.Count)
	}
	slices.Sort(durations)
	slices.Sort(waits)
	s.P50Ms, s.P95Ms, s.P99Ms = Percentile(durations, 0.5), Percentile(durations, 0.95), Percentile(durations, 0.99)
	s.ColdStartWaitP50Ms = Percentile(waits, 0.5)
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile interpolates the p-th percentile of sorted values linearly
// (PostgreSQL's percentile_cont); 0 when there are none.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// ParseSince reads a "since" of the admin API: a time (RFC 3339), or an
// age, a duration before now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since must be a time (RFC 3339) or a duration such as 15m, not %q", v)
	}
	return t, nil
}

// ErrUnknownWindow is returned for a summary window that does not parse.
var ErrUnknownWindow = errors.New("window must be a positive duration such as 15m or 1h, at most 30 days")

// ParseWindow parses a summary's window (default 1h).
func ParseWindow(s string) (time.Duration, error) {
	if s == "" {
		return time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > 30*24*time.Hour {
		return 0, ErrUnknownWindow
	}
	return d, nil
}
