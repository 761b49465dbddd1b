package autoscaler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kpa"
)

// benchFunctions is the fleet size of the tick goal (issue 5: ≤ 50 ms).
const benchFunctions = 10_000

// BenchmarkStep10k times one deciding tick (Step on a second that observes
// and then decides) over 10,000 functions, and reports the heap each
// function costs once it has been decided on (its state, decider buckets and
// metric series). The replica writer does nothing, so the figure is the
// autoscaler's own work; on Kubernetes each write is an API call on top.
//   - at zero: every function is at zero instances with requests buffered
//     in activators, so nothing is scraped: the deciding path alone.
//   - 100 scraped: as at zero, but 100 of the functions have 3 instances
//     whose /stats one real HTTP server in this process answers (300 reads
//     over loopback a tick; the server's CPU is counted too).
//
// cpu-ms/tick is the process's CPU time over the timed ticks: on a shared
// machine it moves less with other work than ns/op does.
func BenchmarkStep10k(b *testing.B) {
	b.Run("at zero", func(b *testing.B) { benchmarkStep(b, 0, "") })
	b.Run("100 scraped", func(b *testing.B) {
		var reads atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reads.Add(1)
			_, _ = io.WriteString(w, `{"averageConcurrency":5,"requests":50,"intervalSeconds":1}`)
		}))
		defer srv.Close()
		benchmarkStep(b, 100, srv.Listener.Addr().String())
		// Two steps before the timed ones, two per timed one.
		if want := int64(300 * (2 + 2*b.N)); reads.Load() != want {
			b.Fatalf("%d reads of /stats, want %d: every instance each second", reads.Load(), want)
		}
	})
}

// benchmarkStep runs BenchmarkStep10k with scraped functions of 3
// instances at admin, the others at zero.
func benchmarkStep(b *testing.B, scraped int, admin string) {
	// Real instances are on distinct hosts, each with its own idle
	// connections; one server stands for all of them here, so it may keep
	// one idle connection per instance.
	scraper := &autoscaler.Scraper{Client: &http.Client{Timeout: time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 3 * scraped}}}
	defer scraper.Client.CloseIdleConnections()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	spec := kpa.Spec{Max: 100, Initial: 0, Target: 70, StableWindow: 60 * time.Second, ScaleToZeroGrace: 30 * time.Second}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a, err := autoscaler.New(scraper, nopWriter{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchFunctions {
		name := fmt.Sprint("function-", i)
		a.SetFunction(now, autoscaler.Target{Namespace: "bench", Name: name, Spec: spec})
		if i < scraped {
			a.SetInstances("bench", name, []string{admin, admin, admin})
		}
	}
	// The activator's reports, every second, of the functions not scraped.
	report := func() {
		for i := scraped; i < benchFunctions; i++ {
			a.SetBuffered(now, "activator-a", "bench", fmt.Sprint("function-", i), 1+i%100)
		}
	}
	// One deciding tick and one observing one: the metric series exist and
	// the ticks timed below are deciding ones.
	for range 2 {
		now = now.Add(time.Second)
		report()
		a.Step(ctx, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)

	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		now = now.Add(time.Second)
		report()
		b.StartTimer()
		start := cpuTime(b)
		a.Step(ctx, now)
		cpu += cpuTime(b) - start
		b.StopTimer()
		now = now.Add(time.Second)
		report()
		a.Step(ctx, now)
		b.StartTimer()
	}
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/tick")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/benchFunctions, "heap-B/function")
	runtime.KeepAlive(a)
}

// cpuTime is the CPU time the process has used, user and system: on a
// shared machine it moves less with other work than the wall time does.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nopWriter is a replica writer that costs nothing: the replicas asked for
// are those there were.
type nopWriter struct{}

func (nopWriter) Scale(_ context.Context, _, _ string, replicas int32) (int32, error) {
	return replicas, nil
}
