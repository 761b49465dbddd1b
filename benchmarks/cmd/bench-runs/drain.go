package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"sless.dev/sless/benchmarks/benchdb"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/runs"
	runspg "sless.dev/sless/runs/postgres"
)

// pendingCalls is how many calls of Pending are timed for each of its
// figures: it is what the dispatcher reads at each look, so its cost at a
// backlog bounds how often the dispatcher can look.
const pendingCalls = 5

// drained is one measurement of the drain.
type drained struct {
	accepted float64       // runs/s accepted while the function was at zero
	pending1 time.Duration // Pending's median with one run not ended
	pendingN time.Duration // with the whole backlog
	took     time.Duration // from the instance's coming to the last run's end
	checked  verdict
}

// verdict is what became of the runs accepted, as the store and the
// instance tell it.
type verdict struct {
	accepted, succeeded, once int
}

// runDrain measures the drain and its floor, rounds times each in turn
// (each in a database of its own), and prints their medians.
func runDrain(ctx context.Context, server string, n, clients, rounds int, within time.Duration) error {
	var accepted, drainRate, floorRate []float64
	var pending1, pendingN, took, floorTook []time.Duration
	var last verdict
	for range rounds {
		d, err := benchdb.With(ctx, server, func(url string) (drained, error) { return measureDrain(ctx, url, n, clients, within) })
		if err != nil {
			return fmt.Errorf("drain of %d runs: %w", n, err)
		}
		f, err := benchdb.With(ctx, server, func(url string) (float64, error) { return syncFloor(ctx, url, n) })
		if err != nil {
			return fmt.Errorf("the drain's floor, %d requests waited on: %w", n, err)
		}
		accepted, pending1, pendingN = append(accepted, d.accepted), append(pending1, d.pending1), append(pendingN, d.pendingN)
		took, drainRate = append(took, d.took), append(drainRate, float64(n)/d.took.Seconds())
		floorRate, floorTook = append(floorRate, f), append(floorTook, time.Duration(float64(n)/f*float64(time.Second)))
		last = d.checked
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	fmt.Printf("| %d runs, function at zero then one instance (async.concurrency %d; median of %d) | time | runs/s | ratio to the floor |\n|---|---|---|---|\n",
		n, runsConcurrency, rounds)
	fmt.Printf("| accepted at zero (%d clients), none attempted | %s | %.0f | |\n", clients, s(time.Duration(float64(n)/median(accepted)*float64(time.Second))), median(accepted))
	fmt.Printf("| drained: from the instance's coming to the last run's end | %s | %.0f | %.2f× |\n", s(median(took)), median(drainRate), median(drainRate)/median(floorRate))
	fmt.Printf("| floor: the same requests waited on, %d clients, same activator and instance | %s | %.0f | 1× |\n\n", runsConcurrency, s(median(floorTook)), median(floorRate))
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Printf("| the dispatcher's look, Pending (median of %d calls; median of %d) | 1 run not ended | %d runs not ended | ratio |\n|---|---|---|---|\n",
		pendingCalls, rounds, n)
	fmt.Printf("| time | %s | %s | %.0f× |\n\n", ms(median(pending1)), ms(median(pendingN)), float64(median(pendingN))/float64(median(pending1)))
	fmt.Printf("Nothing lost: %d accepted, %d succeeded after one attempt, %d seen exactly once by the instance, none duplicated, none missing.\n\n",
		last.accepted, last.succeeded, last.once)
	return nil
}

// measureDrain submits n runs to bench/fn at zero (an activator
// dispatching, no instance), then gives the function an instance and
// times the drain, and checks that nothing was lost: an error names any
// run that did not succeed once.
func measureDrain(ctx context.Context, url string, n, clients int, within time.Duration) (drained, error) {
	var d drained
	inst, err := startInstance()
	if err != nil {
		return d, err
	}
	defer inst.close()
	p, err := start(ctx, url, "", true)
	if err != nil {
		return d, err
	}
	defer p.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	target := p.base + "/fn/bench/fn/orders"
	const body = `{"order": 42}`

	// Pending's cost with one run, in the same database and platform
	// as with the backlog.
	first, err := submitID(client, target, body)
	if err != nil {
		return d, fmt.Errorf("the first run: %w", err)
	}
	if d.pending1, err = timePending(ctx, p.store, 1); err != nil {
		return d, err
	}

	ids := make([]runs.ID, 1, n)
	ids[0] = first
	var mu sync.Mutex
	atZero := time.Now()
	d.accepted, err = rate(n-1, clients, func() error {
		id, err := submitID(client, target, body)
		if err == nil {
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("submitting at zero: %w", err)
	}
	if took := time.Since(atZero); took > fnTimeout/2 {
		return d, fmt.Errorf("submitting %d runs took %s, too close to the function's timeout (%s) that the runs claimed at zero wait within: submit fewer (-drain)",
			n, took.Round(time.Second), fnTimeout)
	}
	// At zero, the dispatcher has claimed up to the function's
	// concurrency, each attempt waiting for an instance; none reached one.
	dem, err := demand(ctx, p.store)
	switch {
	case err != nil:
		return d, err
	case dem.Queued+dem.Running != n || dem.Running > runsConcurrency:
		return d, fmt.Errorf("at zero, %d runs accepted but %d queued and %d running (at most %d)", n, dem.Queued, dem.Running, runsConcurrency)
	case inst.total() != 0:
		return d, fmt.Errorf("at zero, the instance not yet given was sent %d requests", inst.total())
	}
	if d.pendingN, err = timePending(ctx, p.store, n); err != nil {
		return d, err
	}

	begin := time.Now()
	deadline := begin.Add(within)
	p.activator.SetEndpoints("bench", "fn", []string{inst.addr})
	// The instance's count is read in memory: polling the store's
	// Pending meanwhile would cost what the dispatcher needs.
	for inst.distinct() < n {
		if time.Now().After(deadline) {
			return d, fmt.Errorf("after %s, the instance had seen %d of %d runs", within, inst.distinct(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		dem, err := demand(ctx, p.store)
		if err != nil {
			return d, err
		}
		if dem.Queued+dem.Running == 0 {
			break
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("after %s, %d runs queued and %d running of %d", within, dem.Queued, dem.Running, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.took = time.Since(begin)
	d.checked, err = check(ctx, p.store, ids, inst.requests())
	return d, err
}

// check says whether nothing was lost: every run accepted (ids) ended
// succeeded after one attempt, as the store lists them, and the instance
// was sent each exactly once (seen counts its requests by run id).
func check(ctx context.Context, store *runspg.Store, ids []runs.ID, seen map[runs.ID]int) (verdict, error) {
	accepted := make(map[runs.ID]bool, len(ids))
	for _, id := range ids {
		accepted[id] = true
	}
	v := verdict{accepted: len(ids)}
	states := map[runs.State]int{}
	listed, unknown := 0, 0
	q := runs.Query{Limit: runs.MaxListLimit}
	for {
		page, err := store.List(ctx, "bench", "fn", q)
		if err != nil {
			return v, fmt.Errorf("listing the runs: %w", err)
		}
		for _, r := range page {
			listed++
			if !accepted[r.ID] {
				unknown++
				continue
			}
			states[r.State]++
			if r.State == runs.Succeeded && r.Attempts == 1 {
				v.succeeded++
			}
		}
		if len(page) < q.Limit {
			break
		}
		q.Before, q.BeforeID = page[len(page)-1].CreatedAt, page[len(page)-1].ID
	}
	twice, never, strange := 0, 0, 0
	for id, times := range seen {
		switch {
		case !accepted[id]:
			strange++
		case times == 1:
			v.once++
		default:
			twice++
		}
	}
	for id := range accepted {
		if seen[id] == 0 {
			never++
		}
	}
	if len(accepted) != len(ids) || listed != len(ids) || unknown != 0 || v.succeeded != len(ids) ||
		v.once != len(ids) || twice != 0 || never != 0 || strange != 0 {
		return v, fmt.Errorf("runs lost: %d accepted (%d distinct ids); the store lists %d, %d not accepted, by state %v, "+
			"%d succeeded after one attempt; the instance saw %d once, %d more than once, %d never, %d it was not to see",
			len(ids), len(accepted), listed, unknown, states, v.succeeded, v.once, twice, never, strange)
	}
	return v, nil
}

// syncFloor is the drain's floor: the rate of n requests waited on, from
// as many clients as the function attempts runs at once, through the
// same kind of activator to the same kind of instance.
func syncFloor(ctx context.Context, url string, n int) (float64, error) {
	inst, err := startInstance()
	if err != nil {
		return 0, err
	}
	defer inst.close()
	p, err := start(ctx, url, inst.addr, true)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: runsConcurrency}}
	target := p.base + "/fn/bench/fn/orders"
	r, err := rate(n, runsConcurrency, func() error { return postOK(client, target, `{"order": 42}`) })
	if err == nil && inst.total() != n {
		err = fmt.Errorf("%d requests answered, the instance got %d", n, inst.total())
	}
	return r, err
}

// demand is bench/fn's runs not ended, as the dispatcher reads them.
func demand(ctx context.Context, store *runspg.Store) (runs.Demand, error) {
	pending, err := store.Pending(ctx)
	if err != nil {
		return runs.Demand{}, fmt.Errorf("reading the runs pending: %w", err)
	}
	for _, d := range pending {
		if d.Namespace == "bench" && d.Function == "fn" {
			return d, nil
		}
	}
	return runs.Demand{}, nil
}

// timePending is the median time of pendingCalls calls of Pending, each
// checked to find the n runs not ended.
func timePending(ctx context.Context, store *runspg.Store, n int) (time.Duration, error) {
	took := make([]time.Duration, pendingCalls)
	for i := range took {
		begin := time.Now()
		d, err := demand(ctx, store)
		took[i] = time.Since(begin)
		if err != nil {
			return 0, err
		}
		if d.Queued+d.Running != n {
			return 0, fmt.Errorf("pending: %d runs queued and %d running, not %d", d.Queued, d.Running, n)
		}
	}
	return median(took), nil
}

// instance is a function's instance on loopback that answers at once and
// counts its requests by their run id.
type instance struct {
	addr string
	srv  *http.Server
	mu   sync.Mutex
	runs map[runs.ID]int
	all  int
}

func startInstance() (*instance, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the instance's listener: %w", err)
	}
	i := &instance{addr: l.Addr().String(), runs: map[runs.ID]int{}}
	i.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := runs.ID(r.Header.Get(wire.RunIDHeader))
		i.mu.Lock()
		i.all++
		if id != "" {
			i.runs[id]++
		}
		i.mu.Unlock()
		_, _ = io.WriteString(w, "done")
	})}
	go func() {
		if err := i.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("bench-runs: the instance:", err)
		}
	}()
	return i, nil
}

func (i *instance) close() { _ = i.srv.Close() }

// distinct is the runs the instance got a request of; total, all its
// requests.
func (i *instance) distinct() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.runs)
}

func (i *instance) total() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.all
}

// requests is a copy of the instance's count of requests by run id.
func (i *instance) requests() map[runs.ID]int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return maps.Clone(i.runs)
}
