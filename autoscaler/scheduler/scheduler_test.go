package scheduler

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sless.dev/sless/apis/v1alpha1"
)

// recorder is the Firer and the Floors of a test: it notes each fire and
// each floor change, with the (bubble's) time.
type recorder struct {
	mu     sync.Mutex
	fires  []Fire
	floors []string // "floor@seconds since start"
	start  time.Time
	hold   time.Duration // how long a fire takes to be answered
	// startup is the function's measured start-up (none when 0).
	startup time.Duration
}

func (r *recorder) StartupTime(_, _ string) (time.Duration, bool) { return r.startup, r.startup > 0 }

func (r *recorder) Fire(ctx context.Context, f Fire) (int, error) {
	r.mu.Lock()
	r.fires = append(r.fires, f)
	r.mu.Unlock()
	select {
	case <-time.After(r.hold):
	case <-ctx.Done():
	}
	return 200, nil
}

func (r *recorder) SetFloor(_, _ string, floor int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.floors = append(r.floors, fmtFloor(floor, time.Since(r.start)))
}

func fmtFloor(floor int32, at time.Duration) string {
	return string(rune('0'+floor)) + "@" + at.String()
}

func (r *recorder) got() ([]Fire, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.fires), slices.Clone(r.floors)
}

func trigger(t *testing.T, schedule string, preWarm time.Duration) Trigger {
	t.Helper()
	c := &v1alpha1.CronTrigger{Schedule: schedule, Timezone: "UTC"}
	s, loc, err := c.ParseSchedule()
	if err != nil {
		t.Fatal(err)
	}
	return Trigger{Namespace: "ns", Function: "fn", Name: "tick", Schedule: s, Location: loc, PreWarm: preWarm, Timeout: time.Minute}
}

func newScheduler(t *testing.T, r *recorder, ledger Ledger) (*Scheduler, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return New(r, r, ledger, m, slog.New(slog.DiscardHandler)), m
}

// Each fire is sent at its time; the floor rises preWarm before it and
// falls once it is answered.
func TestFiresWarmFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble starts at midnight UTC 2000-01-01: @every 1m fires on the minute.
		r := &recorder{start: time.Now(), hold: 2 * time.Second}
		s, m := newScheduler(t, r, &MemoryLedger{})
		ctx, cancel := context.WithCancel(context.Background())
		s.Set(ctx, "ns", "fn", []Trigger{trigger(t, "* * * * *", 10*time.Second)})
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(3*time.Minute + 5*time.Second)
		synctest.Wait()
		cancel()
		<-done
		fires, floors := r.got()
		if len(fires) != 3 {
			t.Fatalf("%d fires in 3 minutes, want 3", len(fires))
		}
		for i, f := range fires {
			if want := r.start.Add(time.Duration(i+1) * time.Minute); !f.Scheduled.Equal(want) || f.CatchUp {
				t.Errorf("fire %d scheduled %v (catch-up %v), want %v", i, f.Scheduled, f.CatchUp, want)
			}
		}
		want := []string{"1@50s", "0@1m2s", "1@1m50s", "0@2m2s", "1@2m50s", "0@3m2s"}
		if !slices.Equal(floors, want) {
			t.Errorf("floors %v, want %v", floors, want)
		}
		if n := testutil.ToFloat64(m.m.fires.WithLabelValues("ns", "fn", "tick", "ok")); n != 3 {
			t.Errorf("sless_cron_fires_total{result=ok} = %v, want 3", n)
		}
	})
}

// An unset preWarm follows the measured start-up, plus half of it and at
// least a second more; 30s before any start was measured.
func TestAutoPreWarm(t *testing.T) {
	for _, tt := range []struct {
		startup time.Duration
		want    string
	}{
		{0, "1@30s"},
		{time.Second, "1@58s"},
		{4 * time.Second, "1@54s"},
		{2 * time.Hour, "1@0s"}, // at most an hour: from the start
	} {
		t.Run(tt.startup.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &recorder{start: time.Now(), startup: tt.startup}
				s, _ := newScheduler(t, r, &MemoryLedger{})
				ctx, cancel := context.WithCancel(context.Background())
				tr := trigger(t, "* * * * *", 0)
				tr.AutoPreWarm = true
				s.Set(ctx, "ns", "fn", []Trigger{tr})
				done := make(chan struct{})
				go func() { s.Run(ctx); close(done) }()
				time.Sleep(59 * time.Second)
				synctest.Wait()
				cancel()
				<-done
				if _, floors := r.got(); len(floors) == 0 || floors[0] != tt.want {
					t.Errorf("floors %v, want the first %s", floors, tt.want)
				}
			})
		})
	}
}

// Two schedulers sharing a ledger send each fire once.
func TestOneFireAcrossSchedulers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{start: time.Now()}
		ledger := &MemoryLedger{}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 2 {
			s, _ := newScheduler(t, r, ledger)
			s.Set(ctx, "ns", "fn", []Trigger{trigger(t, "@every 10s", 0)})
			wg.Go(func() { s.Run(ctx) })
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		cancel()
		wg.Wait()
		if fires, _ := r.got(); len(fires) != 6 {
			t.Errorf("%d fires in a minute of @every 10s from two schedulers, want 6", len(fires))
		}
	})
}

// Fires missed while no scheduler ran are caught up by one fire, not
// replayed.
func TestOneCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{start: time.Now()}
		ledger := &MemoryLedger{}
		_, _ = ledger.Claim(context.Background(), "ns/fn/tick", time.Now().Add(-10*time.Minute))
		s, _ := newScheduler(t, r, ledger)
		ctx, cancel := context.WithCancel(context.Background())
		s.Set(ctx, "ns", "fn", []Trigger{trigger(t, "* * * * *", 0)})
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		cancel()
		<-done
		fires, _ := r.got()
		if len(fires) != 2 || !fires[0].CatchUp || fires[1].CatchUp {
			t.Fatalf("fires %+v, want one catch-up and then the next on schedule", fires)
		}
	})
}

// Removing a function while it is warming lowers its floor.
func TestRemoveWhileWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{start: time.Now()}
		s, _ := newScheduler(t, r, &MemoryLedger{})
		ctx, cancel := context.WithCancel(context.Background())
		s.Set(ctx, "ns", "fn", []Trigger{trigger(t, "* * * * *", 30*time.Second)})
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(40 * time.Second)
		s.Remove("ns", "fn")
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel()
		<-done
		fires, floors := r.got()
		if len(fires) != 0 || !slices.Equal(floors, []string{"1@30s", "0@40s"}) {
			t.Errorf("fires %v floors %v, want no fire and the floor down at the removal", fires, floors)
		}
	})
}

// Once its context ends (a platform begins to drain), a scheduler lowers
// the floor it raised, and neither warms nor fires again.
func TestStopLowersFloors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{start: time.Now()}
		s, _ := newScheduler(t, r, &MemoryLedger{})
		ctx, cancel := context.WithCancel(context.Background())
		s.Set(ctx, "ns", "fn", []Trigger{trigger(t, "* * * * *", 30*time.Second)})
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(40 * time.Second)
		cancel()
		<-done
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		fires, floors := r.got()
		if len(fires) != 0 || !slices.Equal(floors, []string{"1@30s", "0@40s"}) {
			t.Errorf("fires %v floors %v, want no fire and the floor down when the scheduler stopped", fires, floors)
		}
	})
}

// A FileLedger outlives its process: a new one on the same file knows the
// fires claimed, so a scheduler started on it sends one catch-up fire for
// those missed meanwhile. A file that does not parse is reported and
// replaced at the next claim.
func TestFileLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cron", "ledger.json")
	ctx := context.Background()
	first, err := OpenFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	fired := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if ok, err := first.Claim(ctx, "ns/fn/tick", fired); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	again, err := OpenFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if last, err := again.Last(ctx, "ns/fn/tick"); err != nil || !last.Equal(fired) {
		t.Errorf("Last after reopening = %v, %v; want %v", last, err, fired)
	}
	if ok, _ := again.Claim(ctx, "ns/fn/tick", fired); ok {
		t.Error("a fire claimed before the reopening claimed again")
	}

	synctest.Test(t, func(t *testing.T) {
		// A process fired ten minutes ago, and the next starts now.
		path := filepath.Join(t.TempDir(), "ledger.json")
		before, _ := OpenFileLedger(path)
		if _, err := before.Claim(ctx, "ns/fn/tick", time.Now().Add(-10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		after, err := OpenFileLedger(path)
		if err != nil {
			t.Fatal(err)
		}
		r := &recorder{start: time.Now()}
		s, _ := newScheduler(t, r, after)
		runCtx, cancel := context.WithCancel(ctx)
		s.Set(runCtx, "ns", "fn", []Trigger{trigger(t, "* * * * *", 0)})
		done := make(chan struct{})
		go func() { s.Run(runCtx); close(done) }()
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		<-done
		if fires, _ := r.got(); len(fires) != 1 || !fires[0].CatchUp {
			t.Errorf("fires %+v, want the one catch-up", fires)
		}
	})

	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken, err := OpenFileLedger(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("opening a broken ledger: %v, want an error naming its file", err)
	}
	if ok, err := broken.Claim(ctx, "ns/fn/tick", fired); !ok || err != nil {
		t.Errorf("a claim on a broken ledger = %v, %v; want it claimed and written", ok, err)
	}
	if _, err := OpenFileLedger(path); err != nil {
		t.Errorf("the ledger after a claim: %v", err)
	}
}
