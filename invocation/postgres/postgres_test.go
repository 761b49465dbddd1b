package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgstore"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/internal/syncbuf"
	"sless.dev/sless/invocation"
)

// open opens a store on a database of the test's own and runs it until the
// test ends.
func open(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, prometheus.NewRegistry(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Start())
	return s
}

func record(i int, start time.Time) invocation.Record {
	return invocation.Record{Namespace: "ns", Function: "fn", Trigger: []string{"http", "cron", "rabbitmq"}[i%3],
		TriggerName: map[bool]string{true: "", false: "t"}[i%3 == 0], RequestID: fmt.Sprintf("req-%d", i),
		Status: []int{200, 200, 404, 502}[i%4], Start: start.Add(time.Duration(i) * time.Millisecond),
		Duration: time.Duration(i+1) * time.Millisecond, QueueWait: time.Duration(i%5) * time.Microsecond,
		ColdStart: i%7 == 0, ColdStartWait: time.Duration(i%7) * time.Millisecond, BytesIn: i, BytesOut: -1,
		Instance: "10.0.0.1:8012", Error: map[bool]string{true: "function closed the connection", false: ""}[i%4 == 3]}
}

func written(s *Store) float64 { return testutil.ToFloat64(s.metrics.written) }

// Every field of a record reads back as it was added, the start to the
// microsecond the database keeps.
func TestRoundTrip(t *testing.T) {
	url, _ := pgtest.DB(t)
	s := open(t, url, Options{})
	start := time.Now().UTC().Truncate(time.Microsecond)
	var want []invocation.Record
	for i := range 10 {
		r := record(i, start)
		want = append([]invocation.Record{r}, want...) // newest first
		s.Add(r)
	}
	eventually.True(t, "the records written", func() bool { return written(s) == 10 })
	page, err := s.List(context.Background(), invocation.Query{Namespace: "ns", Function: "fn"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Invocations) != 10 || page.Next != "" {
		t.Fatalf("%d records, next %q; want 10 and no next page", len(page.Invocations), page.Next)
	}
	for i, got := range page.Invocations {
		if got.ID <= 0 {
			t.Errorf("record %d has no id", i)
		}
		got.ID = 0
		if got.Start.Equal(want[i].Start) {
			got.Start = want[i].Start
		}
		if got != want[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

// A burst of 100,000 records, taken as fast as they come: none lost, none
// written twice.
func TestBurst(t *testing.T) {
	const n = 100_000
	url, _ := pgtest.DB(t)
	s := open(t, url, Options{Buffer: n})
	start := time.Now()
	for i := range n {
		s.Add(record(i, start))
	}
	eventually.TrueWithin(t, 2*time.Minute, "the burst written", func() bool { return written(s) == n })
	var count, distinct int
	err := s.pool.QueryRow(context.Background(), "select count(*), count(distinct request_id) from sless_invocations").Scan(&count, &distinct)
	if err != nil || count != n || distinct != n {
		t.Errorf("%d rows, %d distinct (%v); want %d of each", count, distinct, err, n)
	}
	if d := testutil.ToFloat64(s.metrics.droppedFull) + testutil.ToFloat64(s.metrics.droppedDatabase); d != 0 {
		t.Errorf("%v records dropped", d)
	}
}

// A database that goes away is an outage: records are dropped and
// counted, the outage and the recovery are logged once each, and writes
// resume on their own.
func TestOutage(t *testing.T) {
	url, name := pgtest.DB(t)
	var logs syncbuf.Buffer
	s := open(t, url, Options{FlushInterval: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	add := func(from, n int) {
		for i := range n {
			s.Add(record(from+i, time.Now()))
		}
	}
	add(0, 100)
	eventually.True(t, "the first records written", func() bool { return written(s) == 100 })
	pgtest.SetReachable(t, name, false)
	eventually.True(t, "records dropped in the outage", func() bool {
		add(100, 10)
		return testutil.ToFloat64(s.metrics.droppedDatabase) >= 20
	})
	pgtest.SetReachable(t, name, true)
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	before := written(s)
	eventually.True(t, "writes resumed", func() bool {
		add(1000, 10)
		return written(s) > before
	})
	for _, want := range []string{"database unavailable", "database back"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, logs.String())
		}
	}
	if strings.Contains(logs.String(), "password") {
		t.Errorf("the log mentions a password:\n%s", logs.String())
	}
}

// Migrations are idempotent, and processes starting at once take turns.
func TestMigrateAtOnce(t *testing.T) {
	url, _ := pgtest.DB(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(context.Background(), url, prometheus.NewRegistry(), Options{})
			if err == nil {
				s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("opening at once: %v", err)
		}
	}
	s := open(t, url, Options{}) // once more, on the migrated schema
	var version int
	if err := s.pool.QueryRow(context.Background(), "select version from "+versionTable).Scan(&version); err != nil || version != 1 {
		t.Errorf("schema version %d (%v), want 1", version, err)
	}
}

// Partitions are made ahead; retention drops whole old days (and the
// default partition's old rows) and nothing newer.
func TestRetention(t *testing.T) {
	url, _ := pgtest.DB(t)
	s := open(t, url, Options{Retention: 3 * 24 * time.Hour})
	now := time.Now().UTC()
	for _, age := range []time.Duration{0, 50 * time.Hour, 100 * time.Hour, 30 * 24 * time.Hour} {
		s.Add(invocation.Record{Namespace: "ns", Function: "fn", Trigger: "http", Status: 200, Start: now.Add(-age)})
	}
	eventually.True(t, "written", func() bool { return written(s) == 4 })
	if got := partitions(t, s); !strings.Contains(got, table.Partition(now.AddDate(0, 0, pgstore.DaysAhead))) {
		t.Errorf("partitions %s, want the days ahead made", got)
	}
	if err := s.maintain(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	rows, _ := s.pool.Query(context.Background(), "select started_at from sless_invocations order by 1 desc")
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 2 {
		t.Errorf("records left %v, want the two within 3 days", starts)
	}
	if got := partitions(t, s); strings.Contains(got, table.Partition(now.AddDate(0, 0, -5))) {
		t.Errorf("partitions %s, want none older than the retention", got)
	}
}

func partitions(t *testing.T, s *Store) string {
	t.Helper()
	names, err := table.Partitions(context.Background(), s.pool)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}

// Paging through a history while records arrive skips and repeats none.
func TestPagesWhileRecordsArrive(t *testing.T) {
	url, _ := pgtest.DB(t)
	s := open(t, url, Options{FlushInterval: 5 * time.Millisecond})
	start := time.Now().Add(-time.Minute)
	for i := range 500 {
		s.Add(record(i, start))
	}
	eventually.True(t, "written", func() bool { return written(s) == 500 })
	stop := make(chan struct{})
	arriving := make(chan struct{})
	go func() {
		defer close(arriving)
		for i := 500; ; i++ {
			select {
			case <-stop:
				return
			default:
				s.Add(record(i, time.Now()))
				time.Sleep(time.Millisecond)
			}
		}
	}()
	seen := map[string]bool{}
	q := invocation.Query{Namespace: "ns", Function: "fn", Limit: 37, Since: start}
	for {
		page, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Invocations {
			if seen[r.RequestID] {
				t.Fatalf("%s repeated", r.RequestID)
			}
			seen[r.RequestID] = true
		}
		if page.Next == "" {
			break
		}
		c, err := invocation.ParseCursor(page.Next)
		if err != nil {
			t.Fatal(err)
		}
		q.Before = &c
	}
	close(stop)
	<-arriving
	for i := range 500 {
		if !seen[fmt.Sprintf("req-%d", i)] {
			t.Errorf("req-%d skipped", i)
		}
	}
}

// The ring and PostgreSQL answer the same queries with the same JSON.
func TestSameAnswersAsTheRing(t *testing.T) {
	url, _ := pgtest.DB(t)
	s := open(t, url, Options{})
	ring := invocation.NewRing(1000)
	start := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Minute)
	for i := range 200 {
		r := record(i, start)
		s.Add(r)
		ring.Add(r)
	}
	other := record(0, start)
	other.Function = "other"
	s.Add(other)
	ring.Add(other)
	eventually.True(t, "written", func() bool { return written(s) == 201 })
	ctx := context.Background()
	cursor := invocation.Cursor{Start: start.Add(150 * time.Millisecond), ID: 1 << 40}
	for _, q := range []invocation.Query{
		{Limit: 10},
		{Limit: 1000},
		{Limit: 5, Status: 502},
		{Limit: 5, Trigger: "cron"},
		{Limit: 5, Since: start.Add(190 * time.Millisecond)},
		{Limit: 5, Before: &cursor},
	} {
		q.Namespace, q.Function = "ns", "fn"
		fromDB, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		fromRing, _ := ring.List(ctx, q)
		if a, b := shape(t, fromDB), shape(t, fromRing); a != b {
			t.Errorf("query %+v:\n database %s\n ring     %s", q, a, b)
		}
	}
	fromDB, err := s.Summary(ctx, "ns", "fn", start)
	if err != nil {
		t.Fatal(err)
	}
	fromRing, _ := ring.Summary(ctx, "ns", "fn", start)
	if a, b := shape(t, fromDB), shape(t, fromRing); a != b {
		t.Errorf("summary:\n database %s\n ring     %s", a, b)
	}
	if fromDB.Total.Count != 200 || len(fromDB.Triggers) != 3 || fromDB.Total.Errors != 50 {
		t.Errorf("summary %+v, want 200 records, 50 errors, 3 triggers", fromDB)
	}
}

// shape is v's JSON with the stores' own numbering left out, and floats
// to a microsecond, as the two stores round differently.
func shape(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&generic); err != nil {
		t.Fatal(err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "id")
			delete(v, "next")
			for k, x := range v {
				v[k] = walk(x)
			}
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
		case float64:
			return fmt.Sprintf("%.3f", v)
		}
		return v
	}
	out, _ := json.Marshal(walk(generic))
	return string(out)
}
