package local

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
