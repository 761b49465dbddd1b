package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgstore"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runstest"
)

func open(t *testing.T, opts Options) *Store {
	t.Helper()
	url, _ := pgtest.DB(t)
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestStore(t *testing.T) {
	runstest.TestStore(t, func(t *testing.T) runs.Store { return open(t, Options{}) })
}

// Runs outlive the process that took them: a store opened again on the
// database finds them queued, and the one whose attempt was lost with the
// process is due again once its lease runs out.
func TestRunsOutliveTheStore(t *testing.T) {
	ctx := context.Background()
	url, _ := pgtest.DB(t)
	first, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "GET", Path: "/"}, MaxAge: time.Hour}
	var ids []runs.ID
	for range 3 {
		r, _, err := first.Submit(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if as, err := first.Claim(ctx, "default", "fn", 300*time.Millisecond, 3, 1); len(as) != 1 || err != nil {
		t.Fatalf("claim: %d attempts, %v", len(as), err)
	}
	first.Close()

	second, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	claimed := map[runs.ID]int{}
	eventually.True(t, "every run claimed again", func() bool {
		as, err := second.Claim(ctx, "default", "fn", time.Hour, 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			claimed[a.Run.ID] = a.Number
		}
		return len(claimed) == len(ids)
	})
	if claimed[ids[0]] != 2 || claimed[ids[1]] != 1 || claimed[ids[2]] != 1 {
		t.Errorf("attempts %v, want the lost one's second and the others' first", claimed)
	}
}

// A database that cannot be reached refuses a submission with an error
// naming it, and no run is made; once back, submissions are taken again.
func TestDatabaseDown(t *testing.T) {
	ctx := context.Background()
	url, name := pgtest.DB(t)
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "GET", Path: "/"}, MaxAge: time.Hour}
	pgtest.SetReachable(t, name, false)
	if _, created, err := s.Submit(ctx, sub); err == nil || created || !strings.Contains(err.Error(), name) {
		t.Errorf("submit while the database is down: created %t, %v; want an error naming the database", created, err)
	}
	pgtest.SetReachable(t, name, true)
	eventually.True(t, "submissions taken again", func() bool {
		_, created, err := s.Submit(ctx, sub)
		return err == nil && created
	})
	var n int
	if err := s.pool.QueryRow(ctx, "select count(*) from sless_runs").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d runs stored (%v), want the one taken", n, err)
	}
}

// Retention drops the days of runs past it, and the idempotency keys past
// their window are forgotten: the key makes a new run.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	s := open(t, Options{Retention: 3 * 24 * time.Hour})
	sub := runs.Submission{Namespace: "default", Function: "fn", Request: runs.Request{Method: "GET", Path: "/"},
		IdempotencyKey: "k", MaxAge: time.Hour}
	r, _, err := s.Submit(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().AddDate(0, 0, 5)
	if err := s.maintain(ctx, later); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, r.ID); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("a run past the retention: %v, want it gone", err)
	}
	names, err := table.Partitions(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, " "); strings.Contains(got, table.Partition(time.Now())) ||
		!strings.Contains(got, table.Partition(later.AddDate(0, 0, pgstore.DaysAhead))) {
		t.Errorf("partitions %s, want today's dropped and the days ahead of the later day made", got)
	}
	if again, created, err := s.Submit(ctx, sub); err != nil || !created || again.ID == r.ID {
		t.Errorf("the key after its window: %s created %t %v, want a new run", again.ID, created, err)
	}
}

// Submissions made at once are committed together, each answered once
// its run is stored; a row the database refuses (a NUL in its path) fails
// alone, not its batch.
func TestSubmissionsBatched(t *testing.T) {
	s := open(t, Options{})
	ctx := context.Background()
	const n = 400
	ids := make([]runs.ID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path := fmt.Sprintf("/?n=%d", i)
			if i == n/2 {
				path = "/\x00"
			}
			r, created, err := s.Submit(ctx, runs.Submission{Namespace: "default", Function: "fn",
				Request: runs.Request{Method: "POST", Path: path, Body: []byte{byte(i)}}, MaxAge: time.Hour})
			if err == nil && !created {
				err = errors.New("not created")
			}
			ids[i], errs[i] = r.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == n/2) {
			t.Errorf("submission %d: %v", i, err)
		}
	}
	var stored int
	if err := s.pool.QueryRow(ctx, "select count(*) from sless_runs").Scan(&stored); err != nil || stored != n-1 {
		t.Errorf("%d runs stored (%v), want %d", stored, err, n-1)
	}
	for i, id := range ids {
		if i == n/2 {
			continue
		}
		if r, err := s.Get(ctx, id); err != nil || r.State != runs.Queued {
			t.Errorf("run %d (%s): %+v %v", i, id, r, err)
		}
	}
	var batches int
	if err := s.pool.QueryRow(ctx, "select count(distinct xmin::text) from sless_runs").Scan(&batches); err != nil || batches >= n-1 {
		t.Errorf("%d transactions for %d runs submitted at once (%v), want fewer", batches, n-1, err)
	}
}

// Outcomes stored at once are committed together, each answered with its
// own run; an attempt over among them is answered ErrAttemptOver alone.
func TestOutcomesBatched(t *testing.T) {
	s := open(t, Options{})
	ctx := context.Background()
	const n = 200
	for i := range n {
		if _, _, err := s.Submit(ctx, runs.Submission{Namespace: "default", Function: "fn",
			Request: runs.Request{Method: "POST", Path: fmt.Sprintf("/?n=%d", i)}, MaxAge: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	as, err := s.Claim(ctx, "default", "fn", time.Hour, 3, n)
	if err != nil || len(as) != n {
		t.Fatalf("claim: %d attempts, %v", len(as), err)
	}
	over := as[0]
	over.Number++ // an attempt that no longer holds its run
	as = append(as, over)
	errs := make([]error, len(as))
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Go(func() {
			var r runs.Run
			r, errs[i] = s.Finish(ctx, a, runs.Outcome{State: runs.Succeeded, Result: runs.Result{Status: 200 + i%3, Body: []byte{byte(i)}}})
			if errs[i] == nil && (r.ID != a.Run.ID || r.State != runs.Succeeded || r.Status != 200+i%3) {
				errs[i] = fmt.Errorf("answered %+v", r)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == n && !errors.Is(err, runs.ErrAttemptOver) {
			t.Errorf("the attempt over: %v, want ErrAttemptOver", err)
		} else if i < n && err != nil {
			t.Errorf("outcome %d: %v", i, err)
		}
	}
	var batches int
	if err := s.pool.QueryRow(ctx, "select count(distinct xmin::text) from sless_runs").Scan(&batches); err != nil || batches >= n {
		t.Errorf("%d transactions for %d outcomes stored at once (%v), want fewer", batches, n, err)
	}
}
