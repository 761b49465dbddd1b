package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/invocation"
)

// The kept lines are bounded in number and bytes; a follower that does
// not read loses lines, is told how many, and never holds add back.
func TestLogsBounds(t *testing.T) {
	var l logs
	for i := range maxLogLines + 10 {
		l.add("ns", "fn", "ns/fn#1", fmt.Sprint("line ", i))
	}
	got := l.tail("ns", "fn", time.Time{}, allLines)
	if len(got) != maxLogLines || got[0].Line != "line 10" {
		t.Fatalf("%d lines kept, first %q; want the last %d", len(got), got[0].Line, maxLogLines)
	}
	if got := l.tail("ns", "fn", time.Time{}, 3); len(got) != 3 || got[2].Line != fmt.Sprint("line ", maxLogLines+9) {
		t.Errorf("tail 3: %+v", got)
	}
	long := strings.Repeat("x", 4<<10)
	for range 100 {
		l.add("ns", "big", "ns/big#1", long)
	}
	if got := l.tail("ns", "big", time.Time{}, allLines); len(got) != maxLogBytes/len(long) {
		t.Errorf("%d lines of 4 KiB kept, want %d (%d bytes)", len(got), maxLogBytes/len(long), maxLogBytes)
	}

	_, fl, stop := l.follow("ns", "fn", time.Now(), allLines)
	defer stop()
	for i := range followerQueue + 5 { // nobody reads
		l.add("ns", "fn", "ns/fn#1", fmt.Sprint("new ", i))
	}
	for range followerQueue {
		<-fl.lines
	}
	l.add("ns", "fn", "ns/fn#1", "after")
	if ll := <-fl.lines; ll.Line != "after" || ll.Dropped != 5 {
		t.Errorf("next line %+v, want 'after' telling of 5 dropped", ll)
	}
}

// since keeps the lines from a time on, given as an age or a time.
func TestLogsSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l logs
		l.add("ns", "fn", "ns/fn#1", "old")
		time.Sleep(time.Hour)
		mid := time.Now()
		l.add("ns", "fn", "ns/fn#2", "new")
		time.Sleep(time.Minute)
		for _, since := range []string{"30m", mid.Format(time.RFC3339Nano)} {
			q, err := parseLogsQuery(httptest.NewRequest("GET", "/?since="+since, nil), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := l.tail("ns", "fn", q.since, allLines); len(got) != 1 || got[0].Line != "new" || got[0].Instance != "ns/fn#2" {
				t.Errorf("since %s: %+v, want the new line alone", since, got)
			}
		}
		if got := l.tail("ns", "fn", time.Time{}, allLines); len(got) != 2 || got[0].Line != "old" {
			t.Errorf("every line: %+v, want old then new", got)
		}
		if got := l.tail("ns", "fn", time.Now(), allLines); got == nil || len(got) != 0 {
			t.Errorf("since now: %#v, want an empty list", got)
		}
	})
}

// A removed function's lines go, and its followers are told: a stream
// writes what it had queued, then a last line saying the function was
// removed, and ends; a function added back under the name is not theirs.
func TestLogsForget(t *testing.T) {
	var l logs
	l.add("ns", "fn", "ns/fn#1", "one")
	key := types.NamespacedName{Namespace: "ns", Name: "fn"}
	followers := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		if f := l.fns[key]; f != nil {
			return len(f.followers)
		}
		return 0
	}
	w := newGatedWriter(false) // it reads nothing until the function is gone
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.stream(w, httptest.NewRequest(http.MethodGet, "/", nil), "ns", "fn", logsQuery{follow: true})
	}()
	eventually.True(t, "the stream following", func() bool { return followers() == 1 })
	l.add("ns", "fn", "ns/fn#1", "two")
	l.forget("ns", "fn")
	if got := l.tail("ns", "fn", time.Time{}, allLines); len(got) != 0 {
		t.Errorf("after forget: %+v", got)
	}
	l.add("ns", "fn", "ns/fn#9", "back") // a function added back: not the stream's
	close(w.gate)
	<-done
	got := w.lines(t)
	if len(got) != 2 || got[0].Line != "two" || !got[1].Removed {
		t.Errorf("the stream wrote %+v, want the line queued, then the one saying the function was removed", got)
	}
	l.forget("ns", "fn")
	if len(l.fns) != 0 || followers() != 0 {
		t.Errorf("kept %d functions after forget and the stream's end", len(l.fns))
	}
}

// gatedWriter is a client that reads only while its gate is open: its
// writes block until then. It counts flushes.
type gatedWriter struct {
	header  http.Header
	gate    chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
	flushes int
}

func newGatedWriter(open bool) *gatedWriter {
	w := &gatedWriter{header: http.Header{}, gate: make(chan struct{})}
	if open {
		close(w.gate)
	}
	return w
}

func (w *gatedWriter) Header() http.Header { return w.header }
func (w *gatedWriter) WriteHeader(int)     {}
func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *gatedWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushes++
}

func (w *gatedWriter) lines(t *testing.T) []LogLine {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []LogLine
	for line := range strings.Lines(w.buf.String()) {
		var ll LogLine
		if err := json.Unmarshal([]byte(line), &ll); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, ll)
	}
	return out
}

// A followed stream sends the tail, then each new line, flushed. A
// follower that stops reading never holds the output back nor slows
// another follower: it loses the lines past its queue, and is told how
// many once it has read its queue, though no line follows the burst.
func TestLogsFollowSlowFollower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l logs
		for i := range 3 {
			l.add("ns", "fn", "ns/fn#1", fmt.Sprint("tail ", i))
		}
		follow := func(w *gatedWriter) (stop func()) {
			ctx, cancel := context.WithCancel(context.Background())
			r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			done := make(chan struct{})
			go func() { l.stream(w, r, "ns", "fn", logsQuery{tail: allLines, follow: true}); close(done) }()
			return func() { cancel(); <-done }
		}
		slow, fast := newGatedWriter(false), newGatedWriter(true)
		stopSlow, stopFast := follow(slow), follow(fast)
		synctest.Wait() // the slow one blocks on its first write

		const n = followerQueue + 10
		for i := range n {
			l.add("ns", "fn", "ns/fn#1", fmt.Sprint("new ", i))
			if i%100 == 99 {
				synctest.Wait() // the fast follower keeps up
			}
		}
		synctest.Wait()
		close(slow.gate)
		synctest.Wait()
		// The burst is over: the drop is reported once the queue is
		// read, without waiting for another line.
		got := slow.lines(t)
		if len(got) != 3+followerQueue+1 {
			t.Fatalf("slow follower got %d lines after the burst, want the tail, its queue (%d) and a drop report", len(got), followerQueue)
		}
		if last := got[len(got)-1]; last.Dropped != n-followerQueue || last.Line != "" || last.Instance != "" || last.Time.IsZero() {
			t.Errorf("slow follower's last line %+v, want a report of %d dropped", last, n-followerQueue)
		}
		l.add("ns", "fn", "ns/fn#2", "after")
		synctest.Wait()
		stopSlow()
		stopFast()

		got = fast.lines(t)
		if len(got) != 3+n+1 || got[0].Line != "tail 0" || got[3+n].Line != "after" || got[3+n].Instance != "ns/fn#2" {
			t.Fatalf("fast follower got %d lines, want the 3 of the tail, %d new and after", len(got), n)
		}
		for i, ll := range got {
			if ll.Dropped != 0 {
				t.Errorf("fast follower's line %d says %d dropped", i, ll.Dropped)
			}
		}
		if fast.flushes != 1+n+1 {
			t.Errorf("fast follower: %d flushes, want one for the tail and one per line (%d)", fast.flushes, 1+n+1)
		}
		if ct := fast.header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Errorf("Content-Type %q", ct)
		}

		got = slow.lines(t)
		if len(got) != 3+followerQueue+2 {
			t.Fatalf("slow follower got %d lines, want the tail, its queue (%d), the drop report and after", len(got), followerQueue)
		}
		if last := got[len(got)-1]; last.Line != "after" || last.Dropped != 0 {
			t.Errorf("slow follower's last line %+v, want after, the drop already reported", last)
		}
		if got[3].Line != "new 0" || got[3+followerQueue-1].Line != fmt.Sprint("new ", followerQueue-1) {
			t.Errorf("slow follower's queue: %q .. %q, want the first %d new lines", got[3].Line, got[3+followerQueue-1].Line, followerQueue)
		}
		if len(l.fns[types.NamespacedName{Namespace: "ns", Name: "fn"}].followers) != 0 {
			t.Error("followers left after both left")
		}
	})
}

// adminPlatform runs a platform with one function, idle (it never starts
// an instance), behind an admin token; stop stops it.
func adminPlatform(t *testing.T) (p *Platform, base string, stop func()) {
	t.Helper()
	requirePython(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "idle.yaml"), "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: idle}\n"+
		"spec: {runtime: python, source: ./idle, scale: {initial: 0}}\n")
	if err := os.MkdirAll(filepath.Join(dir, "idle"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "idle", "main.py"), "def handle(e):\n    return 'idle'\n")
	p, err := New(Options{Dir: dir, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", CacheDir: t.TempDir(),
		Log: slog.New(slog.DiscardHandler), Poll: time.Hour, Drain: 5 * time.Second, AdminToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	base = "http://" + p.AdminAddr()
	eventually.True(t, "the function known", func() bool {
		st, ok := p.Function("default", "idle")
		return ok && st.State == "idle"
	})
	return p, base, stop
}

// get fetches url with the admin token and returns the status, the
// Content-Type and the body.
func adminGet(t *testing.T, url string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The logs route on a real platform: its JSON, tail, since, its errors,
// the token, and a followed stream (of new lines alone with tail=0) that
// ends when the platform stops.
func TestLogsRoute(t *testing.T) {
	p, base, stop := adminPlatform(t)
	route := base + "/v1/namespaces/default/functions/idle/logs"
	code, ct, body := adminGet(t, route)
	if code != 200 || ct != "application/json" || body != "{\"lines\":[]}\n" {
		t.Errorf("no lines yet: %d %s %q", code, ct, body)
	}
	p.logs.add("default", "idle", "default/idle#1", "one")
	p.logs.add("default", "idle", "default/idle#1", "two")

	code, _, body = adminGet(t, route)
	var shape struct{ Lines []map[string]any }
	if err := json.Unmarshal([]byte(body), &shape); code != 200 || err != nil || len(shape.Lines) != 2 {
		t.Fatalf("lines: %d %q (%v)", code, body, err)
	}
	first := shape.Lines[0]
	if len(first) != 3 || first["instance"] != "default/idle#1" || first["line"] != "one" {
		t.Errorf("first line %v, want exactly time, instance and line", first)
	}
	if ts, _ := first["time"].(string); ts == "" {
		t.Errorf("time %v, want an RFC 3339 time", first["time"])
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("time: %v", err)
	}
	if _, _, body := adminGet(t, route+"?tail=1"); !strings.Contains(body, `"line":"two"`) || strings.Contains(body, `"line":"one"`) {
		t.Errorf("tail=1: %s", body)
	}
	if code, _, body := adminGet(t, route+"?tail=0"); code != 200 || body != "{\"lines\":[]}\n" {
		t.Errorf("tail=0: %d %s, want none of the lines", code, body)
	}
	if _, _, body := adminGet(t, route+"?since=1h"); strings.Count(body, `"line"`) != 2 {
		t.Errorf("since=1h: %s", body)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if _, _, body := adminGet(t, route+"?since="+future); body != "{\"lines\":[]}\n" {
		t.Errorf("since an hour ahead: %s", body)
	}

	for _, c := range []struct{ url, want string }{
		{base + "/v1/namespaces/default/functions/nope/logs", `{"error":"unknown function default/nope"}`},
		{base + "/v1/namespaces/other/functions/idle/logs?follow=true", `{"error":"unknown function other/idle"}`},
	} {
		if code, _, body := adminGet(t, c.url); code != 404 || strings.TrimSpace(body) != c.want {
			t.Errorf("%s: %d %s, want 404 %s", c.url, code, body, c.want)
		}
	}
	for _, q := range []string{"tail=-1", "tail=x", "since=yesterday", "since=-5m", "follow=maybe"} {
		if code, _, body := adminGet(t, route+"?"+q); code != 400 || !strings.Contains(body, `"error":"`) {
			t.Errorf("?%s: %d %s, want 400 with an error", q, code, body)
		}
	}
	resp, err := http.Get(route)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without the token: %d, want 401", resp.StatusCode)
	}

	req, _ := http.NewRequest("GET", route+"?follow=true&tail=0", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("follow: %d %s", resp.StatusCode, ct)
	}
	lines := make(chan LogLine)
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ll LogLine
			if err := json.Unmarshal(sc.Bytes(), &ll); err != nil {
				ended <- err
				return
			}
			lines <- ll
		}
		ended <- sc.Err()
	}()
	next := func() LogLine {
		t.Helper()
		select {
		case ll := <-lines:
			return ll
		case err := <-ended:
			t.Fatalf("stream ended: %v", err)
		case <-time.After(eventually.Within):
			t.Fatal("no line")
		}
		return LogLine{}
	}
	// tail=0: none of the kept lines, the new ones.
	p.logs.add("default", "idle", "default/idle#2", "three")
	if ll := next(); ll.Line != "three" || ll.Instance != "default/idle#2" {
		t.Errorf("followed line %+v, want three of #2", ll)
	}
	stop()
	select {
	case <-ended:
	case ll := <-lines:
		t.Errorf("line %+v after the platform stopped", ll)
	case <-time.After(eventually.Within):
		t.Error("the followed stream did not end with the platform")
	}
}

// The invocations route answers one function's records, newest first,
// within the limit, and refuses a bad limit.
func TestInvocationsRoute(t *testing.T) {
	p, base, _ := adminPlatform(t)
	t0 := time.Now().Add(-time.Minute)
	for i := range 5 {
		p.records.Add(invocation.Record{Namespace: "default", Function: "idle", Trigger: "http", Status: 200 + i, Start: t0.Add(time.Duration(i) * time.Second)})
		p.records.Add(invocation.Record{Namespace: "default", Function: "other", Trigger: "http", Status: 500, Start: t0.Add(time.Duration(i) * time.Second)})
	}
	route := base + "/v1/namespaces/default/functions/idle/invocations"
	code, ct, body := adminGet(t, route+"?limit=2")
	var page struct {
		Invocations []invocation.Record
		Next        string
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || ct != "application/json" || err != nil {
		t.Fatalf("limit=2: %d %s %s", code, ct, body)
	}
	if len(page.Invocations) != 2 || page.Invocations[0].Status != 204 || page.Invocations[1].Status != 203 || page.Next == "" {
		t.Errorf("limit=2: %s, want the two newest (204, 203) and a next page", body)
	}
	if _, _, body := adminGet(t, route); strings.Count(body, `"function":"idle"`) != 5 || strings.Contains(body, `"other"`) {
		t.Errorf("default limit: %s, want idle's 5 records alone", body)
	}
	if _, _, body := adminGet(t, base+"/v1/namespaces/default/functions/none/invocations"); !strings.HasPrefix(body, `{"invocations":[]`) {
		t.Errorf("a function without records: %s", body)
	}
	for _, l := range []string{"0", "10001", "-1", "x"} {
		if code, _, body := adminGet(t, route+"?limit="+l); code != 400 || !strings.Contains(body, "limit must be") {
			t.Errorf("limit=%s: %d %s, want 400", l, code, body)
		}
	}
}
