package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/runs"
)

// runsManifest is hi attempting two runs at once, each bounded to 10 s
// (so that a run lost with its process is due again 20 s on).
const runsManifest = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hi}
spec:
  runtime: python
  source: ./hi
  timeoutSeconds: 10
  scale: {initial: 1}
  async: {concurrency: 2}
`

// Runs accepted by a `sless dev` on PostgreSQL outlive it: killed with
// SIGKILL while two run and the others wait, the next one on the same
// database ends every one succeeded, once each; the two that were
// running when it died are attempted a second time.
func TestDevRunsSurviveKill(t *testing.T) {
	url, _ := pgtest.DB(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "hi.yaml": runsManifest})
	first := startDevIn(t, dir, nil, "--database-url", url)
	waitStatus(t, first.invoke+"/fn/default/hi", http.StatusOK)
	if strings.Contains(first.out.String(), "kept in memory") {
		t.Errorf("sless dev on PostgreSQL says its runs are kept in memory:\n%s", first.out.String())
	}
	var ids []runs.ID
	for range 6 {
		ids = append(ids, submit(t, first.invoke+"/fn/default/hi?sleep=3"))
	}
	db, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	// states counts the runs by state, and names the running ones.
	states := func() (map[runs.State]int, map[runs.ID]bool) {
		rows, _ := db.Query(context.Background(), "select id, state from sless_runs")
		all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID    runs.ID
			State runs.State
		}])
		if err != nil {
			t.Fatal(err)
		}
		n, running := map[runs.State]int{}, map[runs.ID]bool{}
		for _, r := range all {
			n[r.State]++
			running[r.ID] = r.State == runs.Running
		}
		return n, running
	}
	var running map[runs.ID]bool
	eventually.True(t, "two runs running, four queued", func() bool {
		var n map[runs.State]int
		n, running = states()
		return n[runs.Running] == 2 && n[runs.Queued] == 4
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited

	second := startDevIn(t, dir, nil, "--database-url", url)
	eventually.TrueWithin(t, 2*time.Minute, "every run ended", func() bool { n, _ := states(); return n[runs.Succeeded] == len(ids) })
	for _, id := range ids {
		code, body := fetch(t, second.invoke+"/runs/"+string(id), "")
		var r runs.Run
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.State != runs.Succeeded || r.Status != 200 {
			t.Errorf("run %s: %d %s", id, code, body)
		}
		if want := map[bool]int{true: 2, false: 1}[running[id]]; r.Attempts != want {
			t.Errorf("run %s (running when sless dev was killed: %t) attempted %d times, want %d", id, running[id], r.Attempts, want)
		}
	}
}

// submit submits a run of url and returns its id.
func submit(t *testing.T, url string) runs.ID {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Prefer", "respond-async")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ ID runs.ID }
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("submit %s: %d", url, resp.StatusCode)
	}
	return r.ID
}

// The CLI's runs against a sless dev on PostgreSQL: invoke --async and
// --wait, the runs of a function, one run.
func TestRunsCLI(t *testing.T) {
	url, _ := pgtest.DB(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "hi.yaml": runsManifest})
	d := startDevIn(t, dir, nil, "--database-url", url)
	waitStatus(t, d.invoke+"/fn/default/hi", http.StatusOK)
	cli := func(args ...string) (string, error) { t.Helper(); return sless(t, d.admin, args...) }
	idOf := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`^run ([A-Z2-7]{26}) queued\n`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no run id in %q", out)
		}
		return m[1]
	}

	out, err := cli("invoke", "--async", "--wait", "default/hi", "-d", "hello")
	ok := idOf(out)
	if want := regexp.MustCompile(`^run ` + ok + ` queued\nrun ` + ok + ` succeeded after 1 attempt\(s\) in \S+\n200 OK\nhi\n$`); err != nil || !want.MatchString(out) {
		t.Errorf("invoke --async --wait: %v\n%s", err, out)
	}
	out, err = cli("invoke", "--async", "--wait", "default/hi", "/?fail=1")
	failed := idOf(out)
	if err == nil || !strings.Contains(err.Error(), "run "+failed+" failed") || !strings.Contains(out, "after 3 attempt(s)") ||
		!strings.Contains(out, "500 Internal Server Error") || !strings.Contains(out, "asked to fail") {
		t.Errorf("invoke --async --wait of a failing run: %v\n%s", err, out)
	}
	out, err = cli("invoke", "--async", "default/hi", "/?sleep=0")
	queued := idOf(out)
	if err != nil || out != "run "+queued+" queued\n" {
		t.Errorf("invoke --async: %v\n%q", err, out)
	}

	eventually.True(t, "the last run ended", func() bool {
		out, err := cli("run", queued)
		return err == nil && strings.Contains(out, "succeeded")
	})
	out, err = cli("runs", "default/hi")
	rows := lines(out)
	if err != nil || len(rows) != 4 || strings.Join(strings.Fields(rows[0]), " ") != "ID STATE ATTEMPTS STATUS AGE TOOK ERROR" {
		t.Fatalf("runs: %v\n%s", err, out)
	}
	for i, want := range []string{queued + " succeeded 1 200", failed + " failed 3 500", ok + " succeeded 1 200"} {
		if !strings.HasPrefix(strings.Join(strings.Fields(rows[i+1]), " "), want) {
			t.Errorf("row %d %q, want it to start %q", i+1, rows[i+1], want)
		}
	}
	out, err = cli("runs", "default/hi", "--state", "failed", "-o", "json")
	var list adminapi.RunList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Runs) != 1 || string(list.Runs[0].ID) != failed {
		t.Errorf("runs --state failed -o json: %v\n%s", err, out)
	}
	out, err = cli("run", failed)
	for _, want := range []string{"State:      failed", "Attempts:   3", "Result: 500 application/json", "asked to fail"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("run %s: %v, want %q in\n%s", failed, err, want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", string(runs.NewID())}, "no such run"},
		{[]string{"run", "nonsense"}, "no such run"},
		{[]string{"runs", "default/nope"}, "unknown function default/nope"},
		{[]string{"runs", "default/hi", "--state", "done"}, `no run state "done"`},
		{[]string{"invoke", "--wait", "default/hi"}, "--wait follows a run: it goes with --async"},
	} {
		if out, err := cli(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// The database stopped for 20 s under a sless dev keeping runs in it:
// every submission is refused with 503 and Retry-After (nothing accepted
// that could be lost), requests waited on are served throughout, and once
// it is back runs are taken and run again.
func TestDevRunsDatabaseOutage(t *testing.T) {
	url, name := pgtest.DB(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "hi.yaml": runsManifest})
	d := startDevIn(t, dir, nil, "--database-url", url)
	fn := d.invoke + "/fn/default/hi"
	waitStatus(t, fn, http.StatusOK)
	before := submit(t, fn)

	pgtest.SetReachable(t, name, false)
	refused, served := 0, 0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		req, _ := http.NewRequest(http.MethodPost, fn, strings.NewReader("in the outage"))
		req.Header.Set("Prefer", "respond-async")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("a run submitted while the database is out: %s (Retry-After %q), want 503 with Retry-After",
				resp.Status, resp.Header.Get("Retry-After"))
		}
		refused++
		if code, body := fetch(t, fn, ""); code != http.StatusOK || body != "hi" {
			t.Fatalf("a request waited on while the database is out: %d %q, want 200 hi", code, body)
		}
		served++
	}
	pgtest.SetReachable(t, name, true)
	t.Logf("in 20 s of outage: %d submissions refused, %d requests served", refused, served)

	var after runs.ID
	eventually.True(t, "a run accepted once the database is back", func() bool {
		req, _ := http.NewRequest(http.MethodPost, fn, nil)
		req.Header.Set("Prefer", "respond-async")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a runs.Accepted
		if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&a) != nil {
			return false
		}
		after = a.ID
		return true
	})
	for _, id := range []runs.ID{before, after} {
		eventually.True(t, "run "+string(id)+" succeeded", func() bool {
			code, body := fetch(t, d.invoke+"/runs/"+string(id), "")
			var r runs.Run
			return code == http.StatusOK && json.Unmarshal([]byte(body), &r) == nil && r.State == runs.Succeeded
		})
	}
}

// chainManifest is hi passing its answers on to shout, whichever way its
// runs end.
const chainManifest = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hi}
spec:
  runtime: python
  source: ./hi
  scale: {initial: 1}
  async: {maxAttempts: 1, onSuccess: {function: shout}, onFailure: {function: shout}}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: shout}
spec:
  runtime: python
  source: ./shout
  scale: {initial: 1}
`

const shoutHandler = `def handle(e):
    return e['headers'].get('sless-run-parent-state', 'none') + ':' + e['body'].upper()
`

// A Function's onSuccess and onFailure under sless dev on PostgreSQL: a run
// of hi that ends makes a run of shout with its answer, which the CLI
// shows from either end.
func TestDevRunChain(t *testing.T) {
	url, _ := pgtest.DB(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "shout/main.py": shoutHandler, "fns.yaml": chainManifest})
	d := startDevIn(t, dir, nil, "--database-url", url)
	waitStatus(t, d.invoke+"/fn/default/shout", http.StatusOK)
	cli := func(args ...string) (string, error) { t.Helper(); return sless(t, d.admin, args...) }
	for _, tc := range []struct{ path, answer string }{
		{"/", "succeeded:HI"},
		{"/?fail=1", `failed:{"ERROR": "VALUEERROR: ASKED TO FAIL"}`},
	} {
		id := submit(t, d.invoke+"/fn/default/hi"+tc.path)
		var next string
		eventually.True(t, "the run of hi passed on", func() bool {
			out, err := cli("run", string(id))
			m := regexp.MustCompile(`(?m)^Passed on to: +([A-Z2-7]{26})$`).FindStringSubmatch(out)
			if err == nil && m != nil {
				next = m[1]
			}
			return next != ""
		})
		var out string
		eventually.True(t, "the run of shout ended", func() bool {
			var err error
			out, err = cli("run", next)
			return err == nil && strings.Contains(out, "succeeded")
		})
		words := strings.Join(strings.Fields(out), " ")
		for _, want := range []string{"Function: default/shout", "Made by: " + string(id) + " (the chain's run 2)", tc.answer} {
			if !strings.Contains(words, want) {
				t.Errorf("%s: run %s: want %q in\n%s", tc.path, next, want, out)
			}
		}
	}
}

// A Function's onFailure naming a queue under sless dev on PostgreSQL: the
// answer of a run that failed is published to the queue, on the broker of
// --amqp-url, and the CLI says when.
func TestDevRunPublished(t *testing.T) {
	url, _ := pgtest.DB(t)
	ch := amqptest.Channel(t)
	queue := amqptest.Name("failed")
	amqptest.DeleteAtCleanup(t, ch, queue)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hi/main.py": devHandler, "fns.yaml": fmt.Sprintf(`apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hi}
spec:
  runtime: python
  source: ./hi
  scale: {initial: 1}
  async: {maxAttempts: 1, onFailure: {queue: %s}}
`, queue)})
	d := startDevIn(t, dir, nil, "--database-url", url, "--amqp-url", amqptest.URL())
	waitStatus(t, d.invoke+"/fn/default/hi", http.StatusOK)
	id := submit(t, d.invoke+"/fn/default/hi/?fail=1")
	eventually.True(t, "the run's answer published", func() bool {
		out, err := sless(t, d.admin, "run", string(id))
		return err == nil && strings.Contains(out, "Published to:  queue "+queue+" at ")
	})
	msg := amqptest.Take(t, ch, queue)
	if msg.MessageId != string(id) || msg.Headers[runs.MessageStateHeader] != "failed" || !strings.Contains(string(msg.Body), "asked to fail") {
		t.Errorf("message %s %v %q, want run %s's failed answer", msg.MessageId, msg.Headers, msg.Body, id)
	}
}
