package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/runs"
)

// runsManifest is hi attempting two runs at once, each bounded to 5 s
// (so that a run lost with its process is due again 15 s on).
const runsManifest = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hi}
spec:
  runtime: python
  source: ./hi
  timeoutSeconds: 5
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
	states := func() map[runs.State]int {
		rows, _ := db.Query(context.Background(), "select state from sless_runs")
		all, err := pgx.CollectRows(rows, pgx.RowTo[runs.State])
		if err != nil {
			t.Fatal(err)
		}
		n := map[runs.State]int{}
		for _, s := range all {
			n[s]++
		}
		return n
	}
	eventually.True(t, "two runs running, four queued", func() bool {
		n := states()
		return n[runs.Running] == 2 && n[runs.Queued] == 4
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited

	second := startDevIn(t, dir, nil, "--database-url", url)
	eventually.TrueWithin(t, 2*time.Minute, "every run ended", func() bool { return states()[runs.Succeeded] == len(ids) })
	again := 0
	for _, id := range ids {
		code, body := fetch(t, second.invoke+"/runs/"+string(id), "")
		var r runs.Run
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.State != runs.Succeeded || r.Status != 200 {
			t.Errorf("run %s: %d %s", id, code, body)
		}
		if r.Attempts == 2 {
			again++
		}
	}
	if again != 2 {
		t.Errorf("%d runs attempted twice, want the two running when sless dev was killed", again)
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
