package activator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// The autoscaler's side of these calls is tested in the autoscaler package;
// here a server records what the client sends.
func TestAutoscalerClientPokes(t *testing.T) {
	got := make(chan wire.Poke, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body wire.Poke
		if err := strictDecode(r, &body); err != nil {
			t.Errorf("poke body: %v", err)
		}
		if r.URL.Path != wire.PokePath {
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
	if first != (wire.Poke{Namespace: "ns", Name: "a"}) || second != (wire.Poke{Namespace: "ns", Name: "b"}) {
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
	m  map[types.NamespacedName]int
}

func (b *bufferedCounts) Buffered() map[types.NamespacedName]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

func (b *bufferedCounts) set(m map[types.NamespacedName]int) {
	b.mu.Lock()
	b.m = m
	b.mu.Unlock()
}

// strictDecode decodes r's body into v as the autoscaler does: a field
// the type does not have is an error.
func strictDecode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// One report an interval carries every function with requests waiting,
// and once more with 0 each function whose requests are gone.
func TestAutoscalerClientReportsBuffered(t *testing.T) {
	got := make(chan wire.BufferedReport, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep wire.BufferedReport
		if err := strictDecode(r, &rep); err != nil {
			t.Errorf("buffered body: %v", err)
		}
		if r.URL.Path == wire.BufferedPath {
			got <- rep
		}
	}))
	defer srv.Close()
	src := &bufferedCounts{m: map[types.NamespacedName]int{{Namespace: "ns", Name: "a"}: 3, {Namespace: "ns", Name: "b"}: 1, {Namespace: "other", Name: "a"}: 2}}
	p := &AutoscalerClient{BaseURL: srv.URL + "/", ID: "activator-7", Log: quiet}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.ReportBuffered(ctx, src, 10*time.Millisecond)
	want := wire.BufferedReport{Activator: "activator-7", Functions: []wire.BufferedCount{
		{Namespace: "ns", Name: "a", Count: 3}, {Namespace: "ns", Name: "b", Count: 1}, {Namespace: "other", Name: "a", Count: 2}}}
	if r := <-got; !reflect.DeepEqual(r, want) {
		t.Fatalf("first report %+v, want %+v", r, want)
	}
	src.set(map[types.NamespacedName]int{{Namespace: "ns", Name: "b"}: 4})
	want.Functions = []wire.BufferedCount{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b", Count: 4}, {Namespace: "other", Name: "a"}}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			if len(r.Functions) == 3 && r.Functions[1].Count != 4 {
				continue // a report from before the change
			}
			if !reflect.DeepEqual(r, want) {
				t.Fatalf("report after the change %+v, want %+v", r, want)
			}
			// Then ns/b alone, the gone ones reported once.
			if r := <-got; len(r.Functions) != 1 || r.Functions[0] != want.Functions[1] {
				t.Fatalf("next report %+v, want ns/b 4 alone", r)
			}
			return
		case <-deadline:
			t.Fatal("no report of 0 after the requests left")
		}
	}
}

// Above wire.MaxBufferedBatch functions a report is split.
func TestAutoscalerClientSplitsReports(t *testing.T) {
	src := &bufferedCounts{m: map[types.NamespacedName]int{}}
	for i := range wire.MaxBufferedBatch + 1 {
		src.m[types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("f%05d", i)}] = 1
	}
	sizes := make(chan int, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep wire.BufferedReport
		if err := strictDecode(r, &rep); err != nil {
			t.Errorf("buffered body: %v", err)
		}
		sizes <- len(rep.Functions)
	}))
	defer srv.Close()
	// The client's 2 s default timeout, which a full batch may outlast
	// under the race detector on a busy machine, would send it again.
	p := &AutoscalerClient{BaseURL: srv.URL, ID: "a", Log: quiet, Client: &http.Client{Timeout: time.Minute}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.ReportBuffered(ctx, src, 10*time.Millisecond)
	if a, b := <-sizes, <-sizes; a != wire.MaxBufferedBatch || b != 1 {
		t.Fatalf("reports of %d and %d functions, want %d and 1", a, b, wire.MaxBufferedBatch)
	}
}

// readCounter is a BufferedSource that counts its reads.
type readCounter struct {
	bufferedCounts
	reads atomic.Int64
}

func (c *readCounter) Buffered() map[types.NamespacedName]int {
	c.reads.Add(1)
	return c.bufferedCounts.Buffered()
}

// With nothing waiting, nothing is reported: after the zeros of the
// requests that left, the next intervals send nothing.
func TestReportBufferedQuietWhenIdle(t *testing.T) {
	src := &readCounter{bufferedCounts: bufferedCounts{m: map[types.NamespacedName]int{{Namespace: "ns", Name: "a"}: 1}}}
	var mu sync.Mutex
	var reports [][]wire.BufferedCount
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ReportBuffered(ctx, src, time.Millisecond, func(c []wire.BufferedCount) {
		mu.Lock()
		reports = append(reports, c)
		mu.Unlock()
	})
	eventually.True(t, "a first report", func() bool { return src.reads.Load() >= 2 })
	src.set(map[types.NamespacedName]int{})
	// A report is made before the next read: once the source has been
	// read three more times, the intervals after the change are done.
	from := src.reads.Load()
	eventually.True(t, "three more intervals", func() bool { return src.reads.Load() >= from+3 })
	mu.Lock()
	defer mu.Unlock()
	last := reports[len(reports)-1]
	if len(last) != 1 || last[0] != (wire.BufferedCount{Namespace: "ns", Name: "a"}) {
		t.Fatalf("last report %+v, want ns/a with 0 (and nothing after)", last)
	}
	for _, r := range reports[:len(reports)-1] {
		if len(r) != 1 || r[0].Count != 1 {
			t.Fatalf("reports %+v: want ns/a 1 until the zero", reports)
		}
	}
}
