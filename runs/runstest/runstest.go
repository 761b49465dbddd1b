// Package runstest holds the tests every runs.Store must pass, so that the
// in-memory store and PostgreSQL's keep one contract.
package runstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/runs"
)

// TestStore runs the contract's tests, each on a new empty store from
// open.
func TestStore(t *testing.T, open func(t *testing.T) runs.Store) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s runs.Store)
	}{
		{"SubmitAndGet", testSubmitAndGet},
		{"IdempotencyKey", testIdempotencyKey},
		{"ClaimInOrder", testClaimInOrder},
		{"ClaimMany", testClaimMany},
		{"Finish", testFinish},
		{"Retry", testRetry},
		{"GivenBack", testGivenBack},
		{"LeaseLapses", testLeaseLapses},
		{"LastAttemptLost", testLastAttemptLost},
		{"Cancel", testCancel},
		{"Expire", testExpire},
		{"ClaimedOnce", testClaimedOnce},
		{"Pending", testPending},
		{"List", testList},
		{"Over", testOver},
		{"Chain", testChain},
		{"Publish", testPublish},
		{"PublishedOnce", testPublishedOnce},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, open(t)) })
	}
}

var ctx = context.Background()

// maxAttempts is the attempts the tests' claims allow a run.
const maxAttempts = 3

// request is a request with every field set, distinct by n.
func request(n int) runs.Request {
	return runs.Request{Method: "POST", Path: fmt.Sprintf("/orders?n=%d", n),
		Header: [][2]string{{"Content-Type", "application/json"}, {"X-Tag", "a"}, {"X-Tag", "b"}},
		Body:   []byte(fmt.Sprintf(`{"n": %d, "bytes": "\u0000\xff"}`, n))}
}

func submit(t *testing.T, s runs.Store, sub runs.Submission) runs.Run {
	t.Helper()
	if sub.Namespace == "" {
		sub.Namespace, sub.Function = "default", "fn"
	}
	if sub.MaxAge == 0 {
		sub.MaxAge = time.Hour
	}
	r, created, err := s.Submit(ctx, sub)
	if err != nil || !created {
		t.Fatalf("submit: created %t, %v", created, err)
	}
	return r
}

func get(t *testing.T, s runs.Store, id runs.ID) runs.Run {
	t.Helper()
	r, err := s.Get(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func claim(t *testing.T, s runs.Store, lease time.Duration) (runs.Attempt, bool) {
	t.Helper()
	as, err := s.Claim(ctx, "default", "fn", lease, maxAttempts, 1)
	if err != nil || len(as) > 1 {
		t.Fatalf("claim one: %d attempts, %v", len(as), err)
	}
	if len(as) == 0 {
		return runs.Attempt{}, false
	}
	return as[0], true
}

func mustClaim(t *testing.T, s runs.Store) runs.Attempt {
	t.Helper()
	a, ok := claim(t, s, time.Hour)
	if !ok {
		t.Fatal("claim: no run due, want one")
	}
	return a
}

func testSubmitAndGet(t *testing.T, s runs.Store) {
	before := time.Now()
	r := submit(t, s, runs.Submission{Request: request(1)})
	if len(r.ID) < 26 || r.State != runs.Queued || r.Attempts != 0 || r.Namespace != "default" || r.Function != "fn" ||
		r.CreatedAt.Before(before.Add(-time.Second)) || r.StartedAt != nil || r.CompletedAt != nil {
		t.Errorf("submitted: %+v", r)
	}
	if got := get(t, s, r.ID); got.ID != r.ID || got.State != runs.Queued || !got.CreatedAt.Equal(r.CreatedAt) {
		t.Errorf("get: %+v, want %+v", got, r)
	}
	if other := submit(t, s, runs.Submission{Request: request(1)}); other.ID == r.ID {
		t.Errorf("two submissions without a key have one id %s", r.ID)
	}
	if _, err := s.Get(ctx, runs.NewID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("get of an unknown id: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Result(ctx, r.ID); !errors.Is(err, runs.ErrNotEnded) {
		t.Errorf("result of a queued run: %v, want ErrNotEnded", err)
	}
}

func testIdempotencyKey(t *testing.T, s runs.Store) {
	first := submit(t, s, runs.Submission{Request: request(1), IdempotencyKey: "k1"})
	again, created, err := s.Submit(ctx, runs.Submission{Namespace: "default", Function: "fn", Request: request(1),
		IdempotencyKey: "k1", MaxAge: time.Hour})
	if err != nil || created || again.ID != first.ID {
		t.Errorf("the same key and request: %s created %t %v, want the first run %s", again.ID, created, err, first.ID)
	}
	_, _, err = s.Submit(ctx, runs.Submission{Namespace: "default", Function: "fn", Request: request(2),
		IdempotencyKey: "k1", MaxAge: time.Hour})
	if !errors.Is(err, runs.ErrKeyConflict) {
		t.Errorf("the same key for another request: %v, want ErrKeyConflict", err)
	}
	if other := submit(t, s, runs.Submission{Namespace: "default", Function: "other", Request: request(1),
		IdempotencyKey: "k1"}); other.ID == first.ID {
		t.Error("the same key for another function answered the first function's run")
	}
	// Concurrent submissions with one key make one run.
	var wg sync.WaitGroup
	ids := make([]runs.ID, 8)
	for i := range ids {
		wg.Go(func() {
			r, _, err := s.Submit(ctx, runs.Submission{Namespace: "default", Function: "fn", Request: request(3),
				IdempotencyKey: "k3", MaxAge: time.Hour})
			if err != nil {
				t.Errorf("concurrent submit: %v", err)
			}
			ids[i] = r.ID
		})
	}
	wg.Wait()
	if ids[0] == "" || slices.ContainsFunc(ids, func(id runs.ID) bool { return id != ids[0] }) {
		t.Errorf("concurrent submissions with one key: %v, want one run", ids)
	}
}

func testClaimInOrder(t *testing.T, s runs.Store) {
	if _, ok := claim(t, s, time.Hour); ok {
		t.Fatal("claimed a run from an empty store")
	}
	var ids []runs.ID
	for n := range 3 {
		ids = append(ids, submit(t, s, runs.Submission{Request: request(n)}).ID)
	}
	submit(t, s, runs.Submission{Namespace: "default", Function: "other", Request: request(9)})
	for n, id := range ids {
		a := mustClaim(t, s)
		if a.Run.ID != id || a.Number != 1 || a.Run.State != runs.Running || a.Run.Attempts != 1 || a.Run.StartedAt == nil {
			t.Errorf("claim %d: %+v (attempt %d), want %s running, attempt 1", n, a.Run, a.Number, id)
		}
		if want := request(n); a.Request.Method != want.Method || a.Request.Path != want.Path ||
			!slices.Equal(a.Request.Header, want.Header) || string(a.Request.Body) != string(want.Body) {
			t.Errorf("claim %d: request %+v, want %+v", n, a.Request, want)
		}
		if got := get(t, s, id); got.State != runs.Running || got.Attempts != 1 {
			t.Errorf("run %d after its claim: %+v", n, got)
		}
	}
	if a, ok := claim(t, s, time.Hour); ok {
		t.Errorf("claimed %+v: every run of the function is running", a.Run)
	}
}

// One claim takes as many runs as asked, if as many are due, the longest
// due first: a run whose lease ran out is due from its lease's end, after
// the runs queued before.
func testClaimMany(t *testing.T, s runs.Store) {
	var ids []runs.ID
	for n := range 5 {
		ids = append(ids, submit(t, s, runs.Submission{Request: request(n)}).ID)
	}
	claimed := func(n int) []runs.ID {
		t.Helper()
		as, err := s.Claim(ctx, "default", "fn", time.Hour, maxAttempts, n)
		if err != nil {
			t.Fatalf("claim %d: %v", n, err)
		}
		var got []runs.ID
		for _, a := range as {
			if a.Run.State != runs.Running || a.Number != a.Run.Attempts || a.Request.Path == "" {
				t.Errorf("claimed %+v", a)
			}
			got = append(got, a.Run.ID)
		}
		slices.Sort(got)
		return got
	}
	if got := claimed(0); len(got) != 0 {
		t.Errorf("claim 0: %v", got)
	}
	lapsing, err := s.Claim(ctx, "default", "fn", time.Millisecond, maxAttempts, 1)
	if err != nil || len(lapsing) != 1 || lapsing[0].Run.ID != ids[0] {
		t.Fatalf("claim the first: %+v %v", lapsing, err)
	}
	eventually.True(t, "the first's lease ran out", func() bool {
		ds, err := s.Pending(ctx)
		return err == nil && len(ds) == 1 && ds[0].Due == 5
	})
	want := slices.Sorted(slices.Values(ids[1:4]))
	if got := claimed(3); !slices.Equal(got, want) {
		t.Errorf("claim 3: %v, want the first three queued %v", got, want)
	}
	want = slices.Sorted(slices.Values([]runs.ID{ids[0], ids[4]}))
	if got := claimed(10); !slices.Equal(got, want) {
		t.Errorf("claim 10 of 2 due: %v, want the last queued and the lapsed %v", got, want)
	}
	if got := claimed(10); len(got) != 0 {
		t.Errorf("claim with none due: %v", got)
	}
}

func testFinish(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	a := mustClaim(t, s)
	result := runs.Result{Status: 201, ContentType: "text/csv", Body: []byte("a,b\n1,2\n"), Truncated: true, BodySize: 1 << 20}
	done, err := s.Finish(ctx, a, runs.Outcome{State: runs.Succeeded, Result: result})
	if err != nil || done.State != runs.Succeeded || done.Status != 201 || done.CompletedAt == nil || done.Attempts != 1 ||
		done.ResultSize != 1<<20 || !done.ResultTruncated {
		t.Fatalf("finish: %+v %v", done, err)
	}
	got, res, err := s.Result(ctx, r.ID)
	if err != nil || got.State != runs.Succeeded || res.Status != 201 || res.ContentType != "text/csv" ||
		string(res.Body) != string(result.Body) || !res.Truncated || res.BodySize != 1<<20 {
		t.Errorf("result: %+v %+v %v", got, res, err)
	}
	if _, err := s.Finish(ctx, a, runs.Outcome{State: runs.Failed}); !errors.Is(err, runs.ErrAttemptOver) {
		t.Errorf("finish again: %v, want ErrAttemptOver", err)
	}
	if got := get(t, s, r.ID); got.State != runs.Succeeded {
		t.Errorf("after a second finish: %+v", got)
	}
}

func testRetry(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	a := mustClaim(t, s)
	retryAt := time.Now().Add(300 * time.Millisecond)
	q, err := s.Finish(ctx, a, runs.Outcome{State: runs.Queued, RetryAt: retryAt,
		Result: runs.Result{Status: 503, Body: []byte("busy")}, Error: "the function answered 503"})
	if err != nil || q.State != runs.Queued || q.Status != 503 || q.Error != "the function answered 503" || q.CompletedAt != nil {
		t.Fatalf("finish for a retry: %+v %v", q, err)
	}
	second, ok := claim(t, s, time.Hour)
	if ok && time.Now().Before(retryAt) {
		t.Fatalf("claimed %+v before its retry time", second.Run)
	}
	if !ok {
		eventually.True(t, "the run due again", func() bool {
			second, ok = claim(t, s, time.Hour)
			return ok
		})
	}
	if second.Run.ID != r.ID || second.Number != 2 {
		t.Errorf("retried: %+v attempt %d, want %s attempt 2", second.Run, second.Number, r.ID)
	}
	done, err := s.Finish(ctx, second, runs.Outcome{State: runs.Failed, Error: "timed out"})
	if err != nil || done.State != runs.Failed || done.Attempts != 2 || done.Error != "timed out" || done.Status != 503 {
		t.Errorf("failed: %+v %v", done, err)
	}
	// An attempt without an answer keeps the last answer.
	if _, res, err := s.Result(ctx, r.ID); err != nil || res.Status != 503 || string(res.Body) != "busy" {
		t.Errorf("result after an attempt without an answer: %+v %v, want the first attempt's 503", res, err)
	}
}

func testLeaseLapses(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	first, ok := claim(t, s, 200*time.Millisecond)
	if !ok {
		t.Fatal("no run due")
	}
	var second runs.Attempt
	eventually.True(t, "the run claimed again once its lease ran out", func() bool {
		a, ok := claim(t, s, time.Hour)
		second = a
		return ok
	})
	if second.Run.ID != r.ID || second.Number != 2 || second.Run.Attempts != 2 {
		t.Errorf("claimed again: %+v attempt %d", second.Run, second.Number)
	}
	if _, err := s.Finish(ctx, first, runs.Outcome{State: runs.Succeeded}); !errors.Is(err, runs.ErrAttemptOver) {
		t.Errorf("the lapsed attempt's outcome: %v, want ErrAttemptOver", err)
	}
	if done, err := s.Finish(ctx, second, runs.Outcome{State: runs.Succeeded, Result: runs.Result{Status: 200}}); err != nil ||
		done.State != runs.Succeeded {
		t.Errorf("the second attempt's outcome: %+v %v", done, err)
	}
}

func testCancel(t *testing.T, s runs.Store) {
	queued := submit(t, s, runs.Submission{Request: request(1)})
	running := submit(t, s, runs.Submission{Request: request(2)})
	if c, did, err := s.Cancel(ctx, queued.ID); err != nil || !did || c.State != runs.Cancelled || c.CompletedAt == nil {
		t.Errorf("cancel a queued run: %+v %t %v", c, did, err)
	}
	if c, did, err := s.Cancel(ctx, queued.ID); err != nil || did || c.State != runs.Cancelled {
		t.Errorf("cancel a run cancelled: %+v %t %v, want it as it was, not cancelled again", c, did, err)
	}
	a := mustClaim(t, s)
	if a.Run.ID != running.ID {
		t.Errorf("claimed %s, want %s: a cancelled run never starts", a.Run.ID, running.ID)
	}
	if c, did, err := s.Cancel(ctx, running.ID); err != nil || !did || c.State != runs.Cancelled || c.Error != runs.CancelledError {
		t.Errorf("cancel a running run: %+v %t %v", c, did, err)
	}
	if _, err := s.Finish(ctx, a, runs.Outcome{State: runs.Succeeded}); !errors.Is(err, runs.ErrAttemptOver) {
		t.Errorf("a cancelled run's attempt's outcome: %v, want ErrAttemptOver", err)
	}
	ended := submit(t, s, runs.Submission{Request: request(3)})
	if _, err := s.Finish(ctx, mustClaim(t, s), runs.Outcome{State: runs.Succeeded}); err != nil {
		t.Fatal(err)
	}
	if c, did, err := s.Cancel(ctx, ended.ID); err != nil || did || c.State != runs.Succeeded {
		t.Errorf("cancel an ended run: %+v %t %v, want it left succeeded", c, did, err)
	}
	if _, _, err := s.Cancel(ctx, runs.NewID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("cancel an unknown run: %v, want ErrNotFound", err)
	}
	if _, ok := claim(t, s, time.Hour); ok {
		t.Error("a run was due after all were cancelled or ended")
	}
}

func testExpire(t *testing.T, s runs.Store) {
	old := submit(t, s, runs.Submission{Request: request(1), MaxAge: 100 * time.Millisecond})
	young := submit(t, s, runs.Submission{Request: request(2), MaxAge: time.Hour})
	eventually.True(t, "the old run expired", func() bool {
		n, err := s.Expire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(n) > 0 && !slices.Equal(n, []runs.Count{{Namespace: "default", Function: "fn", Runs: 1}}) {
			t.Fatalf("expired %+v, want one run of default/fn", n)
		}
		return len(n) == 1
	})
	if r := get(t, s, old.ID); r.State != runs.Expired || r.Error == "" || r.CompletedAt == nil {
		t.Errorf("expired run: %+v", r)
	}
	if r := get(t, s, young.ID); r.State != runs.Queued {
		t.Errorf("young run: %+v, want it queued", r)
	}
	if a := mustClaim(t, s); a.Run.ID != young.ID {
		t.Errorf("claimed %s, want the young run", a.Run.ID)
	}
}

// testClaimedOnce: claims racing over a function's runs take each run
// once.
func testClaimedOnce(t *testing.T, s runs.Store) {
	const total = 40
	for n := range total {
		submit(t, s, runs.Submission{Request: request(n)})
	}
	eachOnce(t, "claimed", total, 4, func() ([]runs.ID, error) {
		as, err := s.Claim(ctx, "default", "fn", time.Hour, maxAttempts, 3)
		ids := make([]runs.ID, len(as))
		for i, a := range as {
			ids[i] = a.Run.ID
		}
		return ids, err
	})
}

// eachOnce calls take from workers goroutines at once, each until take
// takes nothing or fails, and checks that total runs were taken, each
// once.
func eachOnce(t *testing.T, what string, total, workers int, take func() ([]runs.ID, error)) {
	var mu sync.Mutex
	seen := map[runs.ID]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				ids, err := take()
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if len(ids) == 0 || err != nil {
					return
				}
				mu.Lock()
				for _, id := range ids {
					seen[id]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != total {
		t.Errorf("%d runs %s, want %d", len(seen), what, total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("run %s %s %d times", id, what, n)
		}
	}
}

func testPending(t *testing.T, s runs.Store) {
	pending := func() []runs.Demand {
		t.Helper()
		ds, err := s.Pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(ds, func(a, b runs.Demand) int { return strings.Compare(a.Function, b.Function) })
		return ds
	}
	if ds := pending(); len(ds) != 0 {
		t.Errorf("pending in an empty store: %+v", ds)
	}
	var created []time.Time // of fn's runs, then other's
	for n := range 3 {
		created = append(created, submit(t, s, runs.Submission{Request: request(n)}).CreatedAt)
	}
	created = append(created, submit(t, s, runs.Submission{Namespace: "default", Function: "other", Request: request(9)}).CreatedAt)
	a := mustClaim(t, s)
	if _, err := s.Finish(ctx, a, runs.Outcome{State: runs.Queued, RetryAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s)
	// fn's first run, attempted and queued again, is its oldest queued.
	want := []runs.Demand{{Namespace: "default", Function: "fn", Queued: 2, Running: 1, Due: 1, OldestQueued: created[0]},
		{Namespace: "default", Function: "other", Queued: 1, Due: 1, OldestQueued: created[3]}}
	got := pending()
	if !slices.EqualFunc(got, want, func(a, b runs.Demand) bool {
		return a.OldestQueued.Equal(b.OldestQueued) && a.Namespace == b.Namespace && a.Function == b.Function &&
			a.Queued == b.Queued && a.Running == b.Running && a.Due == b.Due
	}) {
		t.Errorf("pending %+v, want %+v", got, want)
	}
}

// A run whose last attempt was lost (its lease ran out) ends failed
// instead of being attempted once more.
func testLastAttemptLost(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	for n := 1; n <= maxAttempts; n++ {
		var a runs.Attempt
		eventually.True(t, fmt.Sprintf("attempt %d claimed", n), func() bool {
			var ok bool
			a, ok = claim(t, s, 100*time.Millisecond)
			return ok
		})
		if a.Number != n {
			t.Fatalf("attempt %d claimed as %d", n, a.Number)
		}
	}
	eventually.True(t, "the run ended once its last lease ran out", func() bool {
		claim(t, s, time.Hour)
		return get(t, s, r.ID).State.Ended()
	})
	if got := get(t, s, r.ID); got.State != runs.Failed || got.Error != runs.LostError || got.Attempts != maxAttempts || got.CompletedAt == nil {
		t.Errorf("run after its last attempt was lost: %+v", got)
	}
}

// An attempt that never reached the function is given back: the run is
// queued again, that attempt not counted.
func testGivenBack(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	a := mustClaim(t, s)
	back, err := s.Finish(ctx, a, runs.Outcome{State: runs.Queued, RetryAt: time.Now(), Unsent: true, Error: "given back"})
	if err != nil || back.State != runs.Queued || back.Attempts != 0 {
		t.Fatalf("given back: %+v %v, want queued, no attempt", back, err)
	}
	if again := mustClaim(t, s); again.Run.ID != r.ID || again.Number != 1 {
		t.Errorf("claimed again: %s attempt %d, want %s attempt 1", again.Run.ID, again.Number, r.ID)
	}
}

// List answers a function's runs the newest first, by state and in pages.
func testList(t *testing.T, s runs.Store) {
	list := func(q runs.Query) []runs.ID {
		t.Helper()
		rs, err := s.List(ctx, "default", "fn", q)
		if err != nil {
			t.Fatalf("list %+v: %v", q, err)
		}
		ids := make([]runs.ID, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		return ids
	}
	var ids []runs.ID // the newest first
	for n := range 5 {
		ids = slices.Insert(ids, 0, submit(t, s, runs.Submission{Request: request(n)}).ID)
	}
	submit(t, s, runs.Submission{Namespace: "default", Function: "other", Request: request(9)})
	if _, _, err := s.Cancel(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if got := list(runs.Query{}); !slices.Equal(got, ids) {
		t.Errorf("list: %v, want %v", got, ids)
	}
	if got := list(runs.Query{State: runs.Cancelled}); !slices.Equal(got, ids[3:4]) {
		t.Errorf("cancelled runs: %v, want %v", got, ids[3:4])
	}
	first, err := s.List(ctx, "default", "fn", runs.Query{Limit: 2})
	if err != nil || len(first) != 2 {
		t.Fatalf("a page of 2: %+v %v", first, err)
	}
	if got := list(runs.Query{Limit: 2, Before: first[1].CreatedAt, BeforeID: first[1].ID}); !slices.Equal(got, ids[2:4]) {
		t.Errorf("the next page: %v, want %v", got, ids[2:4])
	}
	if got := list(runs.Query{State: runs.Succeeded}); len(got) != 0 {
		t.Errorf("succeeded runs: %v, want none", got)
	}
	for _, q := range []runs.Query{{Limit: -1}, {Limit: runs.MaxListLimit + 1}, {State: "done"}} {
		if _, err := s.List(ctx, "default", "fn", q); err == nil {
			t.Errorf("list %+v: no error", q)
		}
	}
}

// Over names the attempts that no longer hold their run: cancelled, or
// taken by a later attempt once their lease ran out.
func testOver(t *testing.T, s runs.Store) {
	if over, err := s.Over(ctx, nil); err != nil || len(over) != 0 {
		t.Errorf("over of no attempt: %v %v", over, err)
	}
	for n := range 3 {
		submit(t, s, runs.Submission{Request: request(n)})
	}
	held := mustClaim(t, s)
	cancelled := mustClaim(t, s)
	lapsed, _ := claim(t, s, 50*time.Millisecond)
	if _, _, err := s.Cancel(ctx, cancelled.Run.ID); err != nil {
		t.Fatal(err)
	}
	var next runs.Attempt // the lapsed run's next attempt, which holds it
	eventually.True(t, "the short lease taken by another attempt", func() bool {
		var ok bool
		next, ok = claim(t, s, time.Hour)
		return ok && next.Run.ID == lapsed.Run.ID
	})
	over, err := s.Over(ctx, []runs.Attempt{held, cancelled, lapsed, next})
	var got []string
	for _, a := range over {
		got = append(got, fmt.Sprintf("%s/%d", a.Run.ID, a.Number))
	}
	slices.Sort(got)
	want := []string{fmt.Sprintf("%s/%d", cancelled.Run.ID, cancelled.Number), fmt.Sprintf("%s/%d", lapsed.Run.ID, lapsed.Number)}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("over: %v %v, want the cancelled and the lapsed attempts %v", got, err, want)
	}
}

// The run an outcome makes as it ends its run is stored with that end:
// its parent, depth and request as given, the ended run naming it. An
// attempt over makes none, and an outcome queueing the run again none.
func testChain(t *testing.T, s runs.Store) {
	r := submit(t, s, runs.Submission{Request: request(1)})
	a := mustClaim(t, s)
	next := &runs.Submission{Namespace: "default", Function: "fn", Parent: r.ID, Depth: 1, MaxAge: time.Hour, Request: request(2)}
	if again, err := s.Finish(ctx, a, runs.Outcome{State: runs.Queued, RetryAt: time.Now(), Next: next}); err != nil || again.Next != "" {
		t.Fatalf("a run queued again made its next: %+v %v", again, err)
	}
	a = mustClaim(t, s)
	done, err := s.Finish(ctx, a, runs.Outcome{State: runs.Failed, Error: "boom", Next: next})
	if err != nil || done.State != runs.Failed || done.Next == "" || done.Next == r.ID {
		t.Fatalf("finish with a next run: %+v %v", done, err)
	}
	if got := get(t, s, r.ID); got.Next != done.Next {
		t.Errorf("the ended run names %q, want %q", got.Next, done.Next)
	}
	n := get(t, s, done.Next)
	if n.State != runs.Queued || n.Parent != r.ID || n.Depth != 1 || n.Function != "fn" || n.Attempts != 0 {
		t.Errorf("the next run: %+v", n)
	}
	b := mustClaim(t, s)
	if b.Run.ID != n.ID || b.Run.Depth != 1 || b.Run.Parent != r.ID || b.Request.Path != next.Request.Path ||
		string(b.Request.Body) != string(next.Request.Body) || !slices.Equal(b.Request.Header, next.Request.Header) {
		t.Errorf("the next run claimed: %+v, want the chained request %+v", b, next.Request)
	}
	if _, err := s.Finish(ctx, a, runs.Outcome{State: runs.Succeeded, Next: next}); !errors.Is(err, runs.ErrAttemptOver) {
		t.Errorf("an attempt over: %v, want ErrAttemptOver", err)
	}
	if _, ok := claim(t, s, time.Hour); ok {
		t.Error("an attempt over made a next run")
	}
}

// end claims the next run due and ends it with o.
func end(t *testing.T, s runs.Store, o runs.Outcome) runs.Run {
	t.Helper()
	r, err := s.Finish(ctx, mustClaim(t, s), o)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	return r
}

// The answers an outcome says to publish are kept with the run's end and
// handed to a publisher in the order the runs ended, until it says the
// broker has them; none of a run queued again.
func testPublish(t *testing.T, s runs.Store) {
	for n := range 4 {
		submit(t, s, runs.Submission{Request: request(n)})
	}
	answer := runs.Result{Status: 201, ContentType: "text/csv", Body: []byte("a,b\n"), Truncated: true, BodySize: 9000}
	queued, err := s.Finish(ctx, mustClaim(t, s), runs.Outcome{State: runs.Queued, RetryAt: time.Now().Add(time.Hour), Publish: "done"})
	if err != nil || queued.PublishTo != "" {
		t.Fatalf("a run queued again is to be published: %+v %v", queued, err)
	}
	ok := end(t, s, runs.Outcome{State: runs.Succeeded, Result: answer, Publish: "done"})
	failed := end(t, s, runs.Outcome{State: runs.Failed, Error: "the function answered 400", Publish: "failed"})
	end(t, s, runs.Outcome{State: runs.Succeeded})
	if ok.PublishTo != "done" || ok.PublishedAt != nil || get(t, s, failed.ID).PublishTo != "failed" {
		t.Fatalf("ended runs to publish: %+v, %+v", ok, failed)
	}

	var handed [][]runs.Publication
	send := func(n int, err error) runs.Sender {
		return func(_ context.Context, ps []runs.Publication) (int, error) {
			handed = append(handed, ps)
			return min(n, len(ps)), err
		}
	}
	down := errors.New("broker down")
	if n, err := s.Publish(ctx, 10, send(1, down)); n != 1 || !errors.Is(err, down) {
		t.Errorf("publish, one of two sent: %d %v, want 1 and the sender's error", n, err)
	}
	if len(handed) != 1 || len(handed[0]) != 2 {
		t.Fatalf("handed %+v, want the two answers", handed)
	}
	p := handed[0][0]
	if p.Queue != "done" || p.Run.ID != ok.ID || p.Run.State != runs.Succeeded || p.Result.Status != 201 ||
		p.Result.ContentType != "text/csv" || string(p.Result.Body) != "a,b\n" || !p.Result.Truncated || p.Result.BodySize != 9000 {
		t.Errorf("first handed %+v, want the succeeded run's answer to done", p)
	}
	if p := handed[0][1]; p.Queue != "failed" || p.Run.ID != failed.ID || p.Run.Error != "the function answered 400" {
		t.Errorf("second handed %+v, want the failed run to failed", p)
	}
	if r := get(t, s, ok.ID); r.PublishedAt == nil {
		t.Errorf("the answer sent is not marked published: %+v", r)
	}
	if r := get(t, s, failed.ID); r.PublishedAt != nil {
		t.Errorf("the answer not sent is marked published: %+v", r)
	}

	handed = nil
	if n, err := s.Publish(ctx, 10, send(10, nil)); n != 1 || err != nil || len(handed) != 1 || len(handed[0]) != 1 || handed[0][0].Run.ID != failed.ID {
		t.Errorf("publish again: %d %v, handed %+v, want the one not sent", n, err, handed)
	}
	handed = nil
	if n, err := s.Publish(ctx, 10, send(10, nil)); n != 0 || err != nil || len(handed) != 0 {
		t.Errorf("publish with none waiting: %d %v, handed %+v", n, err, handed)
	}
}

// Publishers at once are each handed answers no other is: each answer is
// handed once when every send succeeds.
func testPublishedOnce(t *testing.T, s runs.Store) {
	const total = 30
	for n := range total {
		submit(t, s, runs.Submission{Request: request(n)})
		end(t, s, runs.Outcome{State: runs.Succeeded, Result: runs.Result{Status: 200}, Publish: "done"})
	}
	eachOnce(t, "handed to publish", total, 3, func() ([]runs.ID, error) {
		var ids []runs.ID
		_, err := s.Publish(ctx, 4, func(_ context.Context, ps []runs.Publication) (int, error) {
			for _, p := range ps {
				ids = append(ids, p.Run.ID)
			}
			return len(ps), nil
		})
		return ids, err
	})
}
