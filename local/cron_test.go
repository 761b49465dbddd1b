package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/invocation"
)

// A cron trigger fires through the activator, warmed first: its records
// say cron, name the trigger, and found an instance ready. Disabled, it
// stops, and the function goes back to zero.
func TestCronFiresWarm(t *testing.T) {
	const spec = `  scale: {initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}
  triggers:
    - {name: tick, cron: {schedule: "@every 4s", preWarm: 2s, body: "{}"}}
`
	p := startPlatform(t, manifest("cronfn", spec))
	q := invocation.Query{Namespace: "default", Function: "cronfn", Trigger: "cron"}
	var page invocation.Page
	p.waitFor("three fires", 30*time.Second, func() bool {
		page, _ = p.records.List(context.Background(), q)
		return len(page.Invocations) >= 3
	})
	for _, r := range page.Invocations[:2] { // the newest: the first may race the deploy
		if r.Status != 200 || r.TriggerName != "tick" || r.ColdStart || r.QueueWait != 0 {
			t.Errorf("fire %+v, want a 200 of tick that found an instance warm", r)
		}
	}
	if code, _, _ := p.invoke("cronfn", ""); code != 404 {
		t.Errorf("HTTP to a function with only a cron trigger: %d, want 404", code)
	}
	write(t, filepath.Join(p.dir, "functions.yaml"), manifest("cronfn", strings.Replace(spec, "{name: tick,", "{name: tick, enabled: false,", 1)))
	p.waitFor("back to zero once the trigger is disabled", 30*time.Second, func() bool {
		st := p.status("cronfn")
		return len(st.Triggers) == 1 && st.Triggers[0].State == "disabled" && st.Desired == 0 && st.Ready == 0 && st.Starting == 0
	})
}

// Triggers with enabled: false stay in the manifest but stop: HTTP answers
// 404 naming its trigger, and the status says each is disabled.
func TestDisabledTriggers(t *testing.T) {
	const spec = `  scale: {initial: 0}
  triggers:
    - {name: web, enabled: false, http: {}}
    - {name: tick, enabled: false, cron: {schedule: "@every 1s"}}
    - {name: orders, enabled: false, rabbitmq: {queue: orders}}
`
	p := startPlatform(t, manifest("stopped", spec))
	p.waitFor("the function loaded", 30*time.Second, func() bool { return p.status("stopped").State == "idle" })
	code, body, _ := p.invoke("stopped", "")
	if code != 404 || !strings.Contains(body.Error, "trigger web of default/stopped is disabled") {
		t.Errorf("HTTP to a disabled trigger: %d %+v, want a 404 naming it", code, body)
	}
	for _, tr := range p.status("stopped").Triggers {
		if tr.State != "disabled" {
			t.Errorf("trigger %+v, want disabled", tr)
		}
	}
}

// Fires missed while `sless dev` was stopped get one catch-up fire when it
// starts again: the ledger of fires is kept under the cache directory.
func TestCronCatchUpAfterRestart(t *testing.T) {
	requirePython(t)
	dir, cache := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "fn"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "fn", "main.py"), handler)
	write(t, filepath.Join(dir, "functions.yaml"), manifest("cronfn", `  scale: {initial: 0}
  triggers:
    - {name: tick, cron: {schedule: "@every 2s", preWarm: 0s}}
`))
	withCache := func(o *Options) { o.CacheDir = cache }
	first := runPlatform(t, dir, 50*time.Millisecond, withCache)
	q := invocation.Query{Namespace: "default", Function: "cronfn", Trigger: "cron"}
	first.waitFor("a fire", 30*time.Second, func() bool {
		page, _ := first.records.List(context.Background(), q)
		return len(page.Invocations) > 0
	})
	first.stop()
	stopped := time.Now()
	eventually.True(t, "a fire to fall due while stopped", func() bool { return time.Since(stopped) > 3*time.Second })

	second := runPlatform(t, dir, 50*time.Millisecond, withCache)
	second.waitFor("the catch-up fire", 30*time.Second, func() bool {
		return strings.Contains(second.out.String(), "cron: one catch-up fire for fires missed")
	})
}

// Once `sless dev` drains, its cron triggers neither fire nor warm their
// functions: a fire or a warm-up would start an instance only to stop it.
// The drain is held open by a request in flight; warm's warm-up falls
// within it.
func TestCronStopsWhenDraining(t *testing.T) {
	const zero = "  scale: {initial: 0}\n"
	p := startPlatformWith(t, manifest("slow", zero)+
		manifest("ticker", zero+"  triggers:\n    - {name: tick, cron: {schedule: \"@every 1s\", preWarm: 0s}}\n")+
		manifest("warm", zero+"  triggers:\n    - {name: tick, cron: {schedule: \"@every 90s\", preWarm: 70s}}\n"),
		func(o *Options) { o.Drain = time.Minute })
	ctx := context.Background()
	ticks := invocation.Query{Namespace: "default", Function: "ticker", Trigger: "cron"}
	p.waitFor("ticker fired", 30*time.Second, func() bool {
		page, _ := p.records.List(ctx, ticks)
		return len(page.Invocations) > 0
	})
	go func() { _, _, _ = p.invoke("slow", "sleep=30") }()
	p.waitFor("the slow request in flight", 30*time.Second, func() bool {
		for _, f := range p.act.Functions() {
			if f.Name == "slow" && f.InFlight == 1 {
				return true
			}
		}
		return false
	})
	if st := p.status("warm"); st.Ready+st.Starting > 0 {
		t.Fatalf("warm has instances before the drain (%+v): the test was too slow to begin it", st)
	}

	draining := time.Now()
	p.cancel()
	stopped := make(chan struct{})
	go func() { p.stop(); close(stopped) }()
	for over := false; !over; {
		select {
		case <-stopped:
			over = true
		case <-time.After(eventually.Poll):
			for _, st := range p.Functions() {
				if st.Name == "warm" && st.Ready+st.Starting > 0 {
					t.Fatalf("warm was warmed %v into the drain: %s, %d starting", time.Since(draining), st.State, st.Starting)
				}
			}
		}
	}
	page, err := p.records.List(ctx, ticks)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Invocations {
		if r.Start.After(draining.Add(time.Second)) {
			t.Errorf("ticker fired %v into the drain", r.Start.Sub(draining))
		}
	}
}
