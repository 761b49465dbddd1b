package kubeledger

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/internal/controlplane"
)

// TestClaimOnce: schedulers claiming the same fires through one ConfigMap
// on the real API server send each once, and the next fires still; Last
// reads what was claimed.
func TestClaimOnce(t *testing.T) {
	cfg := controlplane.Start(t)
	const replicas, fires = 4, 20
	ledgers := make([]*Ledger, replicas)
	for i := range ledgers {
		// A client each, as each autoscaler replica has.
		ledgers[i] = &Ledger{Client: controlplane.Client(t, cfg), Namespace: "default", Name: "sless-cron"}
	}
	ctx := context.Background()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var sent atomic.Int64
	for f := range fires {
		scheduled := start.Add(time.Duration(f) * time.Minute)
		var wg sync.WaitGroup
		var won atomic.Int64
		for _, l := range ledgers {
			wg.Go(func() {
				ok, err := l.Claim(ctx, "ns/fn.with.dots/tick", scheduled)
				if err != nil {
					t.Error(err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("fire %d claimed by %d replicas, want 1", f, won.Load())
		}
		sent.Add(won.Load())
	}
	last, err := ledgers[0].Last(ctx, "ns/fn.with.dots/tick")
	if want := start.Add((fires - 1) * time.Minute); err != nil || !last.Equal(want) {
		t.Errorf("Last = %v, %v; want %v", last, err, want)
	}
	if ok, err := ledgers[1].Claim(ctx, "ns/fn.with.dots/tick", start); ok || err != nil {
		t.Errorf("an old fire claimed again: %v, %v", ok, err)
	}
	if last, err := ledgers[2].Last(ctx, "ns/other/tick"); err != nil || !last.IsZero() {
		t.Errorf("Last of a trigger never fired = %v, %v; want zero", last, err)
	}
}
