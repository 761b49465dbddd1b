package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/load/report"
)

// Bad input is a clear error and exit status 2, before anything is sent.
func TestLoadBadInput(t *testing.T) {
	dead := "http://127.0.0.1:" + strconv.Itoa(testfn.FreePort(t)) + "/"
	live := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer live.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unreachable URL", []string{"load", dead, "-d", "1s"}, "cannot reach"},
		{"a bad rate", []string{"load", dead, "--rate", "0:500"}, "want from:to:duration"},
		{"a zero rate", []string{"load", dead, "--rate", "0"}, "positive number"},
		{"a missing body file", []string{"load", dead, "--body-file", filepath.Join(t.TempDir(), "nope")}, "--body-file"},
		{"no target", []string{"load"}, "a URL or --function"},
		{"a bad header", []string{"load", dead, "-H", "no colon"}, `want "Name: value"`},
		{"compare one file", []string{"load", "--compare", "a.json"}, "two --json files"},
		{"compare files that are not runs", []string{"load", "--compare", "/etc/hostname", "/etc/hostname"}, "--compare"},
		{"a remote target", []string{"load", "http://10.1.2.3:80/", "-d", "1s"}, "not a loopback address"},
		// The run's own rules, on a target that answers.
		{"no connections", []string{"load", live.URL, "-c", "0"}, "connections must be from 1"},
		{"too many connections", []string{"load", live.URL, "-c", "10001"}, "connections must be from 1"},
		{"no duration", []string{"load", live.URL, "-d", "0"}, "a duration or a number of requests"},
		{"a negative timeout", []string{"load", live.URL, "--timeout", "-1s"}, "must not be negative"},
		{"a negative warmup", []string{"load", live.URL, "--rate", "10", "--warmup", "-1s"}, "must not be negative"},
		{"messages without a queue", []string{"load", live.URL, "--messages", "5"}, "go with --queue"},
		{"a queue without a wait", []string{"load", "--queue", "q", "--messages", "5", "-d", "0"}, "--duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(tc.args...)
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sless %s = %v (%q), want a usage error with %q", strings.Join(tc.args, " "), err, out, tc.want)
			}
		})
	}
}

// `sless load` against the Go hello, at zero, through a real sless dev:
// 2,000 requests a second for 5 s are all sent and answered, the platform's instances and the cold start are sampled, and the
// --json files of two runs compare.
func TestLoadAgainstDev(t *testing.T) {
	needs.Commands(t, "go")
	hello, err := filepath.Abs("../../config/samples/functions/hello-go")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hello.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: hello}\n" +
		"spec: {runtime: go, source: " + hello + ", handler: Handle, scale: {initial: 0}}\n"})
	d := startDevIn(t, dir, nil, "--allow-external-sources")
	url := d.invoke + "/fn/default/hello"
	eventually.TrueWithin(t, 2*time.Minute, "hello built, at zero", func() bool {
		out, err := run("functions", "--admin", d.admin)
		return err == nil && strings.Contains(out, "idle")
	})

	a, b := filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")
	out, err := run("load", url, "--rate", "2000", "-d", "5s", "-c", "100", "--admin", d.admin, "--json", a)
	if err != nil {
		t.Fatalf("sless load: %v\n%s", err, out)
	}
	r := readLoadRun(t, a)
	rate := float64(r.Result.Requests) / 5
	if rate < 1960 || rate > 2040 || r.Result.Codes[200] != r.Result.Requests || r.Result.Errors != 0 {
		t.Errorf("%.0f answers a second (codes %v, %d errors), want 2000 within 2%%, all 200", rate, r.Result.Codes, r.Result.Errors)
	}
	if n := len(r.Platform); n < 3 || r.Platform[n-1].Ready != 1 || r.Platform[n-1].ColdStarts < 1 {
		t.Errorf("platform samples %+v, want one a second, the instance ready at the end after a cold start", r.Platform)
	}
	if !strings.Contains(out, "open loop, rate 2000") || !strings.Contains(out, "200: ") {
		t.Errorf("summary:\n%s", out)
	}

	if out, err := run("load", url, "-c", "4", "--requests", "500", "--json", b); err != nil {
		t.Fatalf("closed loop: %v\n%s", err, out)
	}
	out, err = run("load", "--compare", a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"answers/s", "p99", "max", "x"} {
		if !strings.Contains(out, row) {
			t.Errorf("compare has no %q:\n%s", row, out)
		}
	}
}

func readLoadRun(t *testing.T, file string) report.Run {
	t.Helper()
	r, err := report.ReadJSON(file)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// `sless load --queue` publishes to a real RabbitMQ queue that a function
// of a real sless dev consumes from zero, and reports the drain by the
// messages the function handled, with its instances over time.
func TestLoadQueue(t *testing.T) {
	requirePython3(t)
	ch := amqptest.Channel(t)
	q := amqptest.Queue(t, ch, "load")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"py/main.py": "def handle(e):\n    return 'ok'\n",
		"worker.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: worker}\nspec:\n  runtime: python\n  source: ./py\n" +
			"  scale: {initial: 0, max: 2}\n  triggers:\n    - {name: jobs, rabbitmq: {queue: " + q + ", prefetch: 10}}\n",
	})
	d := startDevIn(t, dir, nil, "--amqp-url", amqptest.URL())
	eventually.TrueWithin(t, time.Minute, "worker known", func() bool {
		out, err := run("functions", "--admin", d.admin)
		return err == nil && strings.Contains(out, "default/worker")
	})
	file, reportDir := filepath.Join(t.TempDir(), "queue.json"), t.TempDir()
	out, err := run("load", "--queue", q, "--messages", "2000", "--function", "default/worker", "--admin", d.admin,
		"--amqp-url", amqptest.URL(), "--json", file, "--report", reportDir, "-d", "2m")
	if err != nil {
		t.Fatalf("sless load --queue: %v\n%s", err, out)
	}
	r := readLoadRun(t, file)
	if r.Queue == nil || !r.Queue.ByProcessed || r.Queue.Drained <= 0 || r.Queue.Rate <= 0 || r.Queue.Messages != 2000 {
		t.Fatalf("queue run %+v", r.Queue)
	}
	if _, err := os.Stat(filepath.Join(reportDir, report.Files.Drain)); err != nil {
		t.Errorf("the report: %v", err)
	}
	if amqptest.Depth(t, ch, q) != 0 {
		t.Errorf("the queue still holds messages after the drain")
	}
	peak := 0
	for _, s := range r.Platform {
		peak = max(peak, s.Ready)
	}
	if peak < 1 || !strings.Contains(out, "drained") || !strings.Contains(out, "messages/s") {
		t.Errorf("peak %d ready; summary:\n%s", peak, out)
	}
}
