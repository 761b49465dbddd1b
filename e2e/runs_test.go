//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/runs"
)

// nRuns is how many runs TestRunsAcrossKills submits.
const nRuns = 1000

// runsEnd bounds the wait for every run to end: the attempts lost with an
// activator wait for their lease (the function's timeout, 10 s, plus 10 s)
// before they are attempted again, on a loaded 2-core machine.
const runsEnd = 5 * time.Minute

// Issue 39 on the cluster: 1,000 runs submitted through the activators
// (Prefer: respond-async, each with an Idempotency-Key of its own, sent
// again with the same key only when it got no answer or a 503), across an
// activator killed outright (SIGKILL: the attempts it held are lost with
// it, attempted again once their lease runs out) and a function pod killed
// outright (its attempts cut, answered 502, attempted again), both while
// runs are being attempted. Every run ends
// succeeded; none is lost (each id answered is in the store, which holds
// no other run of the function); none is left queued or running; the
// function handled each run, more than once only when the run was
// attempted more than once, and never more often than its attempts (at
// least once, and no hop sends an attempt twice).
func TestRunsAcrossKills(t *testing.T) {
	activatorsOnDatabase(t)
	ns := namespace(t, "e2e-runs")
	handledURL, handled := handledIDs(t)
	// Two instances, so that the pod killed leaves one; 4 runs at a time
	// from each activator, so that the runs take long enough for both
	// kills to find attempts under way; attempts enough for a run cut by
	// both kills and the instances' comings and goings to end succeeded.
	deployWorker(t, ns, "worker", handledURL, "  timeoutSeconds: 10\n"+
		"  scale: {min: 2, initial: 2, max: 2}\n"+
		"  async: {maxAttempts: 10, minBackoff: 1s, maxBackoff: 5s, concurrency: 4}\n")
	// A call waited on (not a run: the worker reports its empty body) so
	// that the activators know the function before the runs come.
	if a := mustInvokeKnown(t, ns, "worker", ""); a.code != http.StatusOK {
		t.Fatalf("worker: %d %s", a.code, a.body)
	}
	waitFor(t, "the worker with two instances ready", func() bool { return readyPods(t, ns, "worker") == 2 })

	url := cluster.activator + "/fn/" + ns + "/worker"
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu     sync.Mutex
		ids    = make([]runs.ID, nRuns) // by submission; "" when not accepted
		resent = map[string]int{}       // submissions sent again, by why
		wg     sync.WaitGroup
		next   = make(chan int)
	)
	// The submissions end before the test does, however it ends.
	t.Cleanup(func() { cancel(); wg.Wait() })
	go func() {
		defer close(next)
		for i := range nRuns {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range 16 {
		wg.Go(func() {
			for i := range next {
				id, again, err := submitRun(ctx, url, fmt.Sprintf("e2e-run-%d", i), fmt.Sprintf(`{"n":%d}`, i))
				mu.Lock()
				ids[i] = id
				for why, n := range again {
					resent[why] += n
				}
				mu.Unlock()
				if err != nil {
					t.Errorf("run %d: %v", i, err)
				}
			}
		})
	}
	submitted := make(chan struct{})
	go func() { wg.Wait(); close(submitted) }()

	// An activator killed outright while runs are attempted.
	waitFor(t, "100 runs handled", func() bool { return t.Failed() || len(handled()) > 100 })
	if t.Failed() {
		t.FailNow() // a submission not accepted: the rest would say no more
	}
	killed := runningActivator(t)
	restarts := containerStatus(killed, "activator").RestartCount
	t.Logf("SIGKILL to activator %s, %d runs handled", killed.Name, len(handled()))
	killContainer(t, killed, "activator")

	// A function pod killed outright while runs are attempted: each of
	// its containers, queue-proxy and function, by SIGKILL (a pod deleted,
	// even at once, is given time to drain).
	waitFor(t, "300 runs handled", func() bool { return len(handled()) > 300 })
	crashed := pods(t, ns, "worker")[0]
	t.Logf("SIGKILL to every container of pod %s of the worker, %d runs handled", crashed.Name, len(handled()))
	for _, c := range []string{controller.QueueProxyContainer, controller.FunctionContainer} {
		killContainer(t, crashed, c)
	}

	waitFor(t, "the activator restarted, the activators available again", func() bool {
		var now corev1.Pod
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return cluster.c.Get(ctx, client.ObjectKeyFromObject(&killed), &now) == nil &&
			containerStatus(now, "activator").RestartCount > restarts && waitAvailable(ctx, "sless-system", "sless-activator") == nil
	})
	waitFor(t, "the pod's containers restarted, the worker with two instances again", func() bool {
		var now corev1.Pod
		if cluster.c.Get(context.Background(), client.ObjectKeyFromObject(&crashed), &now) != nil {
			return false
		}
		for _, c := range []string{controller.QueueProxyContainer, controller.FunctionContainer} {
			if containerStatus(now, c).RestartCount <= containerStatus(crashed, c).RestartCount {
				return false
			}
		}
		return readyPods(t, ns, "worker") == 2
	})
	waitFor(t, "every run submitted", func() bool {
		select {
		case <-submitted:
			return true
		default:
			return false
		}
	})
	if t.Failed() {
		t.FailNow() // a submission not accepted: the rest would say no more
	}
	t.Logf("%d runs accepted; submissions sent again: %v", nRuns, resent)

	// Every run ends. The admin API lists them from the store: one page
	// of all the function's runs (1,000, its largest), read whole.
	token := adminToken(t)
	list := "/v1/namespaces/" + ns + "/functions/worker/runs?limit=1000"
	var page adminapi.RunList
	var pending []runs.Run
	var lastErr error
	if !eventually.Holds(runsEnd, func() bool {
		page = adminapi.RunList{}
		if lastErr = tryAdminGet(token, list, &page); lastErr != nil {
			return false
		}
		pending = slices.DeleteFunc(slices.Clone(page.Runs), func(r runs.Run) bool { return r.State.Ended() })
		return len(page.Runs) >= nRuns && len(pending) == 0
	}) {
		t.Fatalf("after %s, %d runs listed, %d of them not ended (first: %+v); last error %v",
			runsEnd, len(page.Runs), len(pending), first(pending), lastErr)
	}
	// The store holds no run of the function but those answered: a
	// submission sent again made none.
	var more adminapi.RunList
	if page.Next != "" {
		if err := tryAdminGet(token, "/v1/namespaces/"+ns+"/functions/worker/runs"+page.Next, &more); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(page.Runs) + len(more.Runs); n != nRuns {
		t.Errorf("the store holds %d runs of the function, want the %d accepted", n, nRuns)
	}

	// Each run, read by its id (none lost), ended succeeded; the function
	// handled it at least once, more than once only when it was attempted
	// more than once, never more often than it was attempted.
	accepted := map[runs.ID]bool{}
	for _, id := range ids {
		if accepted[id] {
			t.Errorf("two submissions answered the same run %s", id)
		}
		accepted[id] = true
	}
	count := handled()
	delete(count, "") // the call waited on, not a run
	for id, n := range count {
		if !accepted[runs.ID(id)] {
			t.Errorf("the function handled %q %d times, not a run accepted", id, n)
		}
	}
	got := readRuns(t, ids)
	attempts := map[int]int{}
	again := 0
	for i, r := range got {
		id := ids[i]
		n := count[string(id)]
		attempts[r.Attempts]++
		if n > 1 {
			again++
		}
		switch {
		case r.ID != id || r.State != runs.Succeeded || r.Status != http.StatusOK || r.CompletedAt == nil:
			t.Errorf("run %d (%s): %+v, want it succeeded with 200", i, id, r)
		case n == 0:
			t.Errorf("run %d (%s) succeeded after %d attempts, but the function never handled it", i, id, r.Attempts)
		case n > 1 && r.Attempts < 2:
			t.Errorf("run %d (%s): the function handled it %d times, but it was attempted once", i, id, n)
		case n > r.Attempts:
			t.Errorf("run %d (%s): the function handled it %d times in %d attempts", i, id, n, r.Attempts)
		}
	}
	t.Logf("runs by attempts %v; %d handled more than once", attempts, again)
}

// submitRun submits a run to url, with key as its Idempotency-Key, until
// an answer that is not a 503 comes, and returns its id and how often it
// sent it again, by why: with the same key, only after a call without an
// answer (an activator gone: the run may have been stored before the
// connection broke, and the key finds that run) or a 503 (nothing kept).
// Any answer but a 202 is an error.
func submitRun(ctx context.Context, url, key, body string) (runs.ID, map[string]int, error) {
	var code int
	var answer []byte
	var err error
	tries := 0
	again := map[string]int{}
	sent := eventually.Holds(within, func() bool {
		if ctx.Err() != nil {
			return true
		}
		if tries++; tries > 1 {
			if err != nil {
				again["no answer"]++
			} else {
				again["503"]++
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", runs.PreferAsync)
		req.Header.Set(runs.IdempotencyKeyHeader, key)
		var resp *http.Response
		if resp, err = httpClient.Do(req); err != nil {
			return false
		}
		answer, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
		return err == nil && code != http.StatusServiceUnavailable
	})
	switch {
	case ctx.Err() != nil:
		return "", again, ctx.Err()
	case !sent:
		return "", again, fmt.Errorf("no answer but 503 within %s, %d tries: %d %.300s %v", within, tries, code, answer, err)
	case code != http.StatusAccepted:
		return "", again, fmt.Errorf("answered %d %.300s, want 202", code, answer)
	}
	var a runs.Accepted
	if err := json.Unmarshal(answer, &a); err != nil || a.ID == "" || a.Location != runs.Path+string(a.ID) {
		return "", again, fmt.Errorf("202 with %q: %v", answer, err)
	}
	return a.ID, again, nil
}

// readRuns reads each run by its id (GET /runs/{id} on the activators),
// failing the test for one not found.
func readRuns(t *testing.T, ids []runs.ID) []runs.Run {
	t.Helper()
	out := make([]runs.Run, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				var err error
				if out[i], err = readRun(ids[i]); err != nil {
					t.Errorf("run %d: %v", i, err)
				}
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// readRun reads a run by its id.
func readRun(id runs.ID) (runs.Run, error) {
	var r runs.Run
	resp, err := httpClient.Get(cluster.activator + runs.Path + string(id))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return r, err
	}
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("GET %s%s: %d %.300s", runs.Path, id, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("GET %s%s: %v: %.300s", runs.Path, id, err, body)
	}
	return r, nil
}

// runningActivator is an activator pod whose container runs, not one
// leaving.
func runningActivator(t *testing.T) corev1.Pod {
	t.Helper()
	for _, p := range activatorPods(t) {
		if p.DeletionTimestamp == nil && containerStatus(p, "activator").State.Running != nil {
			return p
		}
	}
	t.Fatal("no activator pod running")
	return corev1.Pod{}
}

// first is the first of a list, zero when it is empty.
func first[T any](list []T) T {
	var zero T
	if len(list) == 0 {
		return zero
	}
	return list[0]
}
