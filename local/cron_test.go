package local

import (
	"context"
	"testing"
	"time"

	"sless.dev/sless/invocation"
)

// A cron trigger fires through the activator, warmed first: its records
// say cron, name the trigger, and found an instance ready.
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
}
