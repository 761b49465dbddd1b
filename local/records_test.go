package local

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/invocation"
	"sless.dev/sless/invocation/postgres"
)

// tee keeps each record in a ring and in the database, and answers from
// the database.
type tee struct {
	ring *invocation.Ring
	*postgres.Store
}

func (t tee) Add(r invocation.Record) { t.ring.Add(r); t.Store.Add(r) }

// Records of real requests read back from PostgreSQL as the activator made
// them, every field.
func TestRecordsInPostgres(t *testing.T) {
	p, records, _ := startWithPostgres(t)
	store := records.Store
	for _, q := range []string{"", "sleep=0.01", "crash=1"} {
		_, _, _ = p.invoke("rec", q)
	}
	resp, err := p.client.Post("http://"+p.Addr()+"/fn/default/rec/", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	q := invocation.Query{Namespace: "default", Function: "rec"}
	p.waitFor("4 records in the database", 10*time.Second, func() bool {
		got, err := store.List(context.Background(), q)
		return err == nil && len(got.Invocations) == 4
	})
	want, _ := records.ring.List(context.Background(), q)
	got, _ := store.List(context.Background(), q)
	for i := range got.Invocations {
		g, w := got.Invocations[i], want.Invocations[i]
		g.ID, w.ID = 0, 0
		w.Start = w.Start.Truncate(time.Microsecond) // what PostgreSQL keeps
		g.Start = g.Start.UTC()
		w.Start = w.Start.UTC()
		if gj, wj := mustJSON(t, g), mustJSON(t, w); gj != wj {
			t.Errorf("record %d:\n database %s\n activator %s", i, gj, wj)
		}
	}
	if w := want.Invocations; w[0].BytesIn != 5 || w[1].Status != 502 || w[0].Instance == "" || w[3].BytesIn != 0 {
		t.Errorf("records %+v, want the POST's 5 bytes, the crash's 502, the instance", w)
	}
}

// startWithPostgres runs the platform with its records in a database of
// the test's own, on one function, rec, with an instance ready.
func startWithPostgres(t *testing.T) (*platform, tee, string) {
	t.Helper()
	requirePython(t)
	url, name := pgtest.DB(t)
	reg := prometheus.NewRegistry()
	store, err := postgres.Open(context.Background(), url, reg, postgres.Options{FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Start())
	records := tee{invocation.NewRing(100), store}
	p := startPlatformWith(t, manifest("rec", "  scale: {initial: 1}\n"), func(o *Options) { o.Records, o.Registry = records, reg })
	p.waitFor("rec ready", 30*time.Second, func() bool { return p.status("rec").State == "ready" })
	return p, records, name
}

// A database that goes away changes no answer: records are dropped and
// counted meanwhile, and written again once it is back.
func TestRecordsOutage(t *testing.T) {
	p, _, name := startWithPostgres(t)
	metric := func(name string) float64 {
		resp, err := p.client.Get("http://" + p.AdminAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v float64
		b, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(b)) {
			if f, ok := strings.CutPrefix(line, name+" "); ok {
				v, _ = strconv.ParseFloat(strings.TrimSpace(f), 64)
			}
		}
		return v
	}
	call := func() {
		if code, _, err := p.invoke("rec", ""); code != 200 {
			t.Fatalf("invocation: %d %v, want 200 whatever the database does", code, err)
		}
	}
	call()
	p.waitFor("a record written", 10*time.Second, func() bool { return metric("sless_invocation_records_written_total") >= 1 })
	pgtest.SetReachable(t, name, false)
	p.waitFor("records dropped", 10*time.Second, func() bool {
		call()
		return metric(`sless_invocation_records_dropped_total{reason="database"}`) > 0
	})
	pgtest.SetReachable(t, name, true)
	written := metric("sless_invocation_records_written_total")
	p.waitFor("records written again", 10*time.Second, func() bool {
		call()
		return metric("sless_invocation_records_written_total") > written
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
