package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/internal/promtest"
	"sless.dev/sless/internal/testfn"
)

// obsManifests are the functions the observability test runs: web serves
// HTTP (and fails or crashes when asked), broken does not build, orders
// consumes a queue, tick fires every 5 s, warmed first.
const obsManifests = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: web}
spec:
  runtime: python
  source: ./py
  concurrency: 4
  scale: {initial: 0, max: 3}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: broken}
spec:
  runtime: go
  source: ./broken
  handler: Handle
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: orders}
spec:
  runtime: python
  source: ./py
  scale: {initial: 0, max: 2}
  triggers:
    - {name: orders, rabbitmq: {queue: %s, prefetch: 5}}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: tick}
spec:
  runtime: python
  source: ./py
  scale: {initial: 0}
  triggers:
    - {name: every5s, cron: {schedule: "@every 5s", preWarm: 2s, body: "{}"}}
`

const obsHandler = `import os
def handle(e):
    if 'crash' in e['query']:
        os._exit(3)
    if 'fail' in e['query']:
        raise ValueError('asked to fail')
    return 'ok'
`

// rateInterval stands for Grafana's $__rate_interval: two minutes holds
// every event of the run, so a one-off (the cold start, the crash) is in
// the window of each query.
const rateInterval = "2m"

// TestObservability runs `sless dev --prometheus`: the real Prometheus it
// starts scrapes the platform, with PostgreSQL records, while it serves
// HTTP load, starts from zero, sees a crash and a failed build, consumes a
// RabbitMQ queue and fires a cron trigger. Then every recording rule and
// every query of every panel of config/grafana/sless.json returns at least
// one series, every rule evaluates without error, and docs/metrics.md
// lists every sless series the page has, with its type.
func TestObservability(t *testing.T) {
	promtest.Require(t, "prometheus")
	requirePython3(t)
	ch := amqptest.Channel(t)
	queue := amqptest.Queue(t, ch, "obs")
	dbURL, _ := pgtest.DB(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"functions.yaml": fmt.Sprintf(obsManifests, queue),
		"py/main.py":     obsHandler,
		"broken/fn.go":   "package broken\n\nfunc Handle( {\n",
	})
	promPort := testfn.FreePort(t)
	d := startDevIn(t, dir, nil, "--prometheus", "--prometheus-listen", "127.0.0.1:"+strconv.Itoa(promPort),
		"--database-url", dbURL, "--amqp-url", amqptest.URL())
	prom := "http://127.0.0.1:" + strconv.Itoa(promPort)
	eventually.True(t, "Prometheus answering queries", func() bool {
		_, err := promtest.Query(t.Context(), prom, "vector(1)")
		return err == nil
	})

	drive(t, d, ch, queue, 30*time.Second)
	ctx := t.Context()
	eventually.TrueWithin(t, time.Minute, "a cron fire seen by Prometheus", func() bool {
		s, err := promtest.Query(ctx, prom, `sless_cron_fires_total{result="ok"} > 0`)
		return err == nil && len(s) > 0
	})

	for _, r := range recordingRules(t) {
		expectSeries(t, prom, "recording rule "+r, r)
	}
	for _, p := range dashboardQueries(t) {
		expectSeries(t, prom, fmt.Sprintf("panel %q", p.title), p.expr)
	}
	checkRuleHealth(t, prom)
	checkDocumented(t, d.admin+"/metrics")
}

// drive sends the platform its load for the given time: web about 20
// requests a second (one in 20 failing, and one crash after 10 s) and a
// run every two seconds (one in two failing), broken and a message to
// orders each second.
func drive(t *testing.T, d *devProcess, ch *amqp.Channel, queue string, length time.Duration) {
	t.Helper()
	start := time.Now()
	crashed := false
	codes := map[string]map[int]int{"web": {}, "broken": {}}
	for i := 0; time.Since(start) < length; i++ {
		query := ""
		switch {
		case !crashed && time.Since(start) > 10*time.Second:
			query, crashed = "?crash=1", true
		case i%20 == 19:
			query = "?fail=1"
		}
		code, _ := fetch(t, d.invoke+"/fn/default/web"+query, "")
		codes["web"][code]++
		if i%20 == 0 {
			code, _ := fetch(t, d.invoke+"/fn/default/broken", "")
			codes["broken"][code]++
			amqptest.Publish(t, ch, queue, []byte(strconv.Itoa(i)))
		}
		if i%40 == 10 { // a run, one in two failing
			submit(t, d.invoke+"/fn/default/web"+[]string{"", "?fail=1"}[i/40%2])
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("answers by code: %v", codes)
	if codes["web"][200] == 0 || codes["broken"][503] == 0 {
		t.Fatalf("answers by code %v: want web to serve and broken to be refused (503)", codes)
	}
}

// expectSeries fails the test, naming what the query is, unless expr
// returns a series within 30 s (the last scrape and evaluation may lag).
func expectSeries(t *testing.T, prom, what, expr string) {
	t.Helper()
	var err error
	ok := eventually.Holds(eventually.Within, func() bool {
		var s promtest.Series
		s, err = promtest.Query(t.Context(), prom, expr)
		return err == nil && len(s) > 0
	})
	if !ok {
		t.Errorf("%s returns no series (%v): %s", what, err, expr)
	}
}

// recordingRules lists the records of config/prometheus/rules.yml.
func recordingRules(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../config/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "- record: "); ok {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("no recording rule in rules.yml")
	}
	return out
}

type panelQuery struct{ title, expr string }

// dashboardQueries lists every target of every panel of the dashboard,
// with its variables set to all functions and rateInterval.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile("../../config/grafana/sless.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("config/grafana/sless.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", rateInterval, "$namespace", ".*", "$function", ".*")
	var out []panelQuery
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			out = append(out, panelQuery{p.Title, vars.Replace(q.Expr)})
		}
	}
	return out
}

// checkRuleHealth fails for every rule Prometheus could not evaluate.
func checkRuleHealth(t *testing.T, prom string) {
	t.Helper()
	code, body := fetch(t, prom+"/api/v1/rules", "")
	var rules struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health, LastError string }
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &rules); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/rules: %d %v", code, err)
	}
	n := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s of %s: health %s: %s", r.Name, g.Name, r.Health, r.LastError)
			}
		}
	}
	if n == 0 {
		t.Error("Prometheus loaded no rule")
	}
}

// docRow is a row of docs/metrics.md's tables: | `name` | type | ...
var docRow = regexp.MustCompile("^\\| `(sless_[a-z_]+)` \\| ([a-z]+) \\|")

// checkDocumented fails for every sless series on the page missing from
// docs/metrics.md or documented with another type.
func checkDocumented(t *testing.T, page string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			documented[m[1]] = m[2]
		}
	}
	code, body := fetch(t, page, "")
	if code != 200 {
		t.Fatalf("GET %s: %d", page, code)
	}
	n := 0
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" || !strings.HasPrefix(f[2], "sless_") {
			continue
		}
		n++
		if doc, ok := documented[f[2]]; !ok || doc != f[3] {
			t.Errorf("%s, a %s on the page, is documented in docs/metrics.md as %q", f[2], f[3], doc)
		}
	}
	if n < 20 {
		t.Errorf("%d sless series families on %s, want the page of a busy platform", n, page)
	}
}

// --prometheus without prometheus on PATH is a usage error that names
// the package to install, and starts nothing.
func TestDevPrometheusMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := run("dev", "--prometheus", "--functions", t.TempDir())
	if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), "apt-get install prometheus") {
		t.Errorf("sless dev --prometheus without prometheus: %T %v, want a usage error naming the package", err, err)
	}
}
