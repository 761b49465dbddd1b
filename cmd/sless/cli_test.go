package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sless.dev/sless/internal/amqptest"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/syncbuf"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/local"
)

// sless runs the CLI in this process against the admin API at admin and
// returns its output and error.
func sless(t *testing.T, admin string, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--admin", admin))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// runDev runs a platform on the manifests in dir, behind token when it is
// set, until stop or the end of the test, and returns its admin API's URL.
func runDev(t *testing.T, dir, token string) (admin string, stop func()) {
	t.Helper()
	p, stop := runPlatform(t, dir, token)
	return "http://" + p.AdminAddr(), stop
}

// runPlatform is runDev's platform, with its options changed by each of
// opts.
func runPlatform(t *testing.T, dir, token string, opts ...func(*local.Options)) (p *local.Platform, stop func()) {
	t.Helper()
	o := local.Options{Dir: dir, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", CacheDir: t.TempDir(),
		Log: slog.New(slog.DiscardHandler), Poll: time.Hour, Drain: 5 * time.Second, AdminToken: token}
	for _, opt := range opts {
		opt(&o)
	}
	p, err := local.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return p, stop
}

// lines splits output into its lines.
func lines(out string) []string { return strings.Split(strings.TrimRight(out, "\n"), "\n") }

// The CLI against a real sless dev: every command's table and JSON.
func TestCLI(t *testing.T) {
	d := startDevWith(t, nil)
	eventually.True(t, "hi ready 2/2", func() bool {
		var list struct{ Functions []local.FunctionStatus }
		out, err := sless(t, d.admin, "functions", "-o", "json")
		return err == nil && json.Unmarshal([]byte(out), &list) == nil && len(list.Functions) == 1 &&
			list.Functions[0].Ready == 2 && list.Functions[0].State == "ready"
	})
	cli := func(t *testing.T, args ...string) (string, error) { t.Helper(); return sless(t, d.admin, args...) }

	t.Run("Functions", func(t *testing.T) {
		out, err := cli(t, "functions")
		rows := lines(out)
		if err != nil || len(rows) != 2 {
			t.Fatalf("functions: %v\n%s", err, out)
		}
		if got := strings.Fields(rows[0]); strings.Join(got, " ") != "NAME RUNTIME STATE READY URL AGE" {
			t.Errorf("header %q", rows[0])
		}
		row := strings.Fields(rows[1])
		if len(row) != 6 || row[0] != "default/hi" || row[1] != "python" || row[2] != "ready" || row[3] != "2/2" || row[4] != d.url ||
			!regexp.MustCompile(`^\d+[smhd]$`).MatchString(row[5]) {
			t.Errorf("row %q, want default/hi python ready 2/2 %s and an age", rows[1], d.url)
		}
		// Columns line up: each starts where its header does.
		if strings.Index(rows[0], "URL") != strings.Index(rows[1], "http://") {
			t.Errorf("URL column not aligned:\n%s", out)
		}
	})
	t.Run("FunctionsJSON", func(t *testing.T) {
		out, err := cli(t, "functions", "-o", "json")
		var list struct {
			Functions []map[string]any `json:"functions"`
		}
		if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Functions) != 1 {
			t.Fatalf("functions -o json: %v\n%s", err, out)
		}
		f := list.Functions[0]
		if f["namespace"] != "default" || f["name"] != "hi" || f["url"] != d.url || f["ready"] != 2.0 || f["created"] == nil {
			t.Errorf("function %v", f)
		}
	})

	t.Run("Invoke", func(t *testing.T) {
		body := filepath.Join(t.TempDir(), "body")
		if err := os.WriteFile(body, []byte("payload"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := cli(t, "invoke", "default/hi", "-d", "@"+body, "-H", "X-Test: yes", "some/path")
		rows := lines(out)
		if err != nil || len(rows) != 2 || !regexp.MustCompile(`^200 OK in \S+s$`).MatchString(rows[0]) || rows[1] != "hi" {
			t.Fatalf("invoke: %v\n%s", err, out)
		}
		out, err = cli(t, "invoke", "hi", "-X", "PUT", "-d", "inline", "-H", "x-test: two", "-H", "X-Other: 1", "/other")
		if err != nil || !strings.HasPrefix(out, "200 OK in ") {
			t.Fatalf("invoke -X PUT: %v\n%s", err, out)
		}
		root := newRootCommand() // -d @- reads standard input, as curl does
		var stdout bytes.Buffer
		root.SetIn(strings.NewReader("from stdin"))
		root.SetOut(&stdout)
		root.SetErr(&stdout)
		root.SetArgs([]string{"invoke", "hi", "-d", "@-", "/stdin", "--admin", d.admin})
		if err := root.ExecuteContext(context.Background()); err != nil || !strings.HasPrefix(stdout.String(), "200 OK in ") {
			t.Fatalf("invoke -d @-: %v\n%s", err, stdout.String())
		}
		if _, err := cli(t, "invoke", "hi", "-d", "@"+filepath.Dir(body)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("invoke -d @DIR: %v, want it refused", err)
		}
		// What the function saw, from its output.
		for _, want := range []string{"serving POST /some/path body=payload x-test=yes", "serving PUT /other body=inline x-test=two",
			"serving POST /stdin body=from stdin"} {
			eventually.True(t, "the function's line "+want, func() bool {
				out, _ := cli(t, "logs", "default/hi")
				return strings.Contains(out, want)
			})
		}
	})
	t.Run("InvokeBinary", func(t *testing.T) {
		// To a terminal (a real pseudo-terminal), bytes are refused, as
		// curl refuses them; --save writes them to a file, and to a pipe
		// they pass.
		pts := pseudoTerminal(t)
		root := newRootCommand()
		root.SetOut(pts)
		root.SetErr(pts)
		root.SetArgs([]string{"invoke", "hi", "?binary=1", "--admin", d.admin})
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), "the answer is binary (application/octet-stream): not written to the terminal; --save FILE") {
			t.Errorf("invoke of bytes to a terminal: %v", err)
		}
		file := filepath.Join(t.TempDir(), "body")
		if out, err := cli(t, "invoke", "hi", "?binary=1", "--save", file); err != nil || !strings.HasPrefix(out, "200 OK in ") {
			t.Fatalf("invoke --save: %v\n%s", err, out)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "\x89PNG\r\n\x1a\n\x00\x00" {
			t.Errorf("--save wrote %q, %v", b, err)
		}
		if out, err := cli(t, "invoke", "hi", "?binary=1"); err != nil || !strings.Contains(out, "PNG") {
			t.Errorf("invoke of bytes to a pipe: %v %q", err, out)
		}
	})
	t.Run("InvokeStreams", func(t *testing.T) {
		// The function streams a line, then holds the next until the flag
		// file exists: the CLI must print the first before.
		flag := filepath.Join(t.TempDir(), "release")
		pr, pw := io.Pipe()
		root := newRootCommand()
		root.SetOut(pw)
		root.SetErr(pw)
		root.SetArgs([]string{"invoke", "default/hi", "?until=" + url.QueryEscape(flag), "--admin", d.admin})
		done := make(chan error, 1)
		go func() {
			done <- root.ExecuteContext(context.Background())
			pw.Close()
		}()
		r := bufio.NewReader(pr)
		for _, want := range []*regexp.Regexp{regexp.MustCompile(`^200 OK in \S+s\n$`), regexp.MustCompile(`^first\n$`)} {
			if line, err := r.ReadString('\n'); err != nil || !want.MatchString(line) {
				t.Fatalf("invoke printed %q (%v) while the function streams, want %s", line, err, want)
			}
		}
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if rest, err := io.ReadAll(r); err != nil || string(rest) != "second\n" {
			t.Errorf("then %q %v, want the second line", rest, err)
		}
		if err := <-done; err != nil {
			t.Errorf("invoke: %v", err)
		}
	})
	t.Run("InvokeJSON", func(t *testing.T) {
		out, err := cli(t, "invoke", "default/hi", "-o", "json")
		var got struct {
			Status     int                 `json:"status"`
			DurationMs float64             `json:"durationMs"`
			Headers    map[string][]string `json:"headers"`
			Body       string              `json:"body"`
		}
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Status != 200 || got.Body != "hi" || got.DurationMs <= 0 ||
			!strings.HasPrefix(got.Headers["Content-Type"][0], "text/plain") {
			t.Errorf("invoke -o json: %v\n%s", err, out)
		}
	})
	t.Run("InvokeFailure", func(t *testing.T) {
		out, err := cli(t, "invoke", "default/hi", "?fail=1")
		if err == nil || !strings.Contains(err.Error(), "500") {
			t.Errorf("invoke of a failing request: %v, want an error naming the 500", err)
		}
		if !strings.HasPrefix(out, "500 Internal Server Error in ") || !strings.Contains(out, "asked to fail") {
			t.Errorf("invoke of a failing request printed:\n%s\nwant the status and the body", out)
		}
		if _, err := cli(t, "invoke", "default/nobody"); err == nil || err.Error() != "unknown function default/nobody" {
			t.Errorf("invoke of an unknown function: %v", err)
		}
		if _, err := cli(t, "invoke", "hi", "-H", "no colon"); err == nil || !strings.Contains(err.Error(), "want 'Name: value'") {
			t.Errorf("invoke -H without a colon: %v", err)
		}
	})

	t.Run("Describe", func(t *testing.T) {
		_, _ = cli(t, "invoke", "hi", "?fail=1") // a 500 among the invocations
		out, err := cli(t, "describe", "hi")     // the default namespace
		if err != nil {
			t.Fatalf("describe: %v\n%s", err, out)
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^Name: +default/hi$`),
			regexp.MustCompile(`(?m)^Runtime: +python$`),
			regexp.MustCompile(`(?m)^URL: +` + regexp.QuoteMeta(d.url) + `$`),
			regexp.MustCompile(`(?m)^State: +ready$`),
			regexp.MustCompile(`(?m)^Replicas: +2 ready, 0 starting, 2 desired$`),
			regexp.MustCompile(`(?m)^Crashes: +0$`),
			regexp.MustCompile(`(?m)^Spec:\n(  .*\n)*  runtime: python\n`),
			regexp.MustCompile(`(?m)^  initial: 2$|^    initial: 2$`),
			regexp.MustCompile(`(?m)^Instances:\n  NAME +STATE +GENERATION +AGE +ADDR\n  default/hi#\d+ +ready +0 +\d+[smhd] +127\.0\.0\.1:\d+\n  default/hi#\d+ +ready`),
			regexp.MustCompile(`(?m)^Recent invocations:\n  START +TRIGGER +STATUS .*\n  \S+ +http +\d{3} `),
			regexp.MustCompile(`(?m)^  \S+ +http +500 `), // the failed request
		} {
			if !want.MatchString(out) {
				t.Errorf("describe does not match %s:\n%s", want, out)
			}
		}
		if _, err := cli(t, "describe", "default/nobody"); err == nil || err.Error() != "unknown function default/nobody" {
			t.Errorf("describe of an unknown function: %v", err)
		}
	})
	t.Run("DescribeJSON", func(t *testing.T) {
		out, err := cli(t, "describe", "default/hi", "-o", "json")
		var got struct {
			Function    local.FunctionStatus
			Invocations struct{ Invocations []map[string]any }
		}
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Function.Name != "hi" || len(got.Function.Instances) != 2 ||
			got.Function.Spec.Runtime != "python" || len(got.Invocations.Invocations) == 0 || got.Invocations.Invocations[0]["function"] != "hi" {
			t.Errorf("describe -o json: %v\n%s", err, out)
		}
	})

	t.Run("Logs", func(t *testing.T) {
		out, err := cli(t, "logs", "default/hi")
		if err != nil || !strings.Contains(out, "| serving GET / body= x-test=\n") {
			t.Fatalf("logs: %v\n%s", err, out)
		}
		prefix := regexp.MustCompile(`^default/hi#\d+ \| `)
		for _, l := range lines(out) {
			if !prefix.MatchString(l) {
				t.Errorf("line %q is not 'instance | line'", l)
			}
		}
		out, err = cli(t, "logs", "hi", "--tail", "1")
		if err != nil || len(lines(out)) != 1 {
			t.Errorf("logs --tail 1: %v\n%s", err, out)
		}
		if out, err := cli(t, "logs", "hi", "--tail", "0"); err != nil || out != "" {
			t.Errorf("logs --tail 0: %v %q, want nothing", err, out)
		}
		if out, err := cli(t, "logs", "hi", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)); err != nil || out != "" {
			t.Errorf("logs --since an hour ahead: %v %q, want nothing", err, out)
		}
		out, err = cli(t, "logs", "hi", "--since", "1h", "-o", "json")
		var got struct {
			Lines []map[string]any `json:"lines"`
		}
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got.Lines) == 0 || got.Lines[0]["instance"] == nil || got.Lines[0]["time"] == nil {
			t.Errorf("logs -o json: %v\n%s", err, out)
		}
		if out, err := cli(t, "logs", "default/nobody"); err == nil || err.Error() != "unknown function default/nobody" || out != "" {
			t.Errorf("logs of an unknown function: %v %q", err, out)
		}
		if _, err := cli(t, "logs", "hi", "--since", "yesterday"); err == nil || !strings.Contains(err.Error(), "since must be") {
			t.Errorf("logs --since yesterday: %v", err)
		}
	})
	// -f --tail 0: the new lines, none of the past.
	t.Run("LogsFollow", func(t *testing.T) {
		for _, output := range []string{"", "json"} {
			var followed syncbuf.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				root := newRootCommand()
				root.SetOut(&followed)
				root.SetArgs([]string{"logs", "default/hi", "-f", "--tail", "0", "-o", output, "--admin", d.admin})
				done <- root.ExecuteContext(ctx)
			}()
			path := "/followed-" + cmp.Or(output, "table")
			eventually.True(t, "a followed line", func() bool {
				_, _ = cli(t, "invoke", "default/hi", path)
				return strings.Contains(followed.String(), "serving GET "+path)
			})
			cancel()
			if err := <-done; err != nil {
				t.Errorf("logs -f -o %q: %v", output, err)
			}
			for _, l := range lines(followed.String()) {
				var ll local.LogLine
				switch {
				case output == "json" && (json.Unmarshal([]byte(l), &ll) != nil || ll.Instance == "" || ll.Time.IsZero()):
					t.Errorf("logs -f -o json: line %q is not a log line's JSON", l)
				case output == "" && !regexp.MustCompile(`^default/hi#\d+ \| `).MatchString(l):
					t.Errorf("logs -f: line %q is not 'instance | line'", l)
				case !strings.Contains(l, "serving GET "+path):
					t.Errorf("logs -f --tail 0: line %q, want only the new lines of %s", l, path)
				}
			}
		}
	})
}

// The CLI's errors, against a real platform behind a token, and none.
func TestCLIErrors(t *testing.T) {
	admin, _ := runDev(t, t.TempDir(), "s3cret")

	t.Setenv("SLESS_ADMIN_TOKEN", "")
	for _, args := range [][]string{{"functions"}, {"describe", "hi"}, {"logs", "hi"}, {"logs", "hi", "-f"}, {"invoke", "hi"}} {
		if _, err := sless(t, admin, args...); err == nil || err.Error() != "the admin API needs a token: set SLESS_ADMIN_TOKEN" {
			t.Errorf("%v without the token: %v", args, err)
		}
	}
	// sless load of a platform URL goes on without the platform's view,
	// saying why.
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer target.Close()
	if out, err := sless(t, admin, "load", target.URL+"/fn/default/hi", "-d", "1s", "--rate", "20"); err != nil ||
		!strings.Contains(out, "no view of the platform") || !strings.Contains(out, "needs a token") {
		t.Errorf("load without the token: %v\n%s", err, out)
	}
	t.Setenv("SLESS_ADMIN_TOKEN", "wrong")
	if _, err := sless(t, admin, "functions"); err == nil || err.Error() != "the admin API refused the token in SLESS_ADMIN_TOKEN" {
		t.Errorf("functions with a wrong token: %v, want it said refused", err)
	}

	t.Setenv("SLESS_ADMIN_TOKEN", "s3 cret")
	if _, err := sless(t, admin, "functions"); err == nil || !strings.Contains(err.Error(), "SLESS_ADMIN_TOKEN has a space or control character at byte 2") {
		t.Errorf("functions with a token that has a space inside: %v, want it said", err)
	}
	t.Setenv("SLESS_ADMIN_TOKEN", "s3cret\n") // as a file or a decoded Secret has it
	if out, err := sless(t, admin, "functions"); err != nil || strings.Join(strings.Fields(out), " ") != "NAME RUNTIME STATE READY URL AGE" {
		t.Errorf("functions of none: %v %q, want the header alone", err, out)
	}
	if out, err := sless(t, admin, "functions", "-o", "json"); err != nil || out != "{\"functions\":[]}\n" {
		t.Errorf("functions -o json of none: %v %q", err, out)
	}
	for _, args := range [][]string{{"describe", "nope"}, {"logs", "nope"}, {"logs", "nope", "-f"}, {"invoke", "nope"}, {"describe", "other/nope"}, {"invocations", "nope"}} {
		want := "unknown function default/nope"
		if strings.Contains(args[1], "/") {
			want = "unknown function " + args[1]
		}
		if out, err := sless(t, admin, args...); err == nil || err.Error() != want || out != "" {
			t.Errorf("%v: %v %q, want %q and no output", args, err, out, want)
		}
	}
	if _, err := sless(t, admin, "functions", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "-o must be json") {
		t.Errorf("-o yaml: %v", err)
	} else if _, ok := err.(usageError); !ok {
		t.Errorf("-o yaml: %T, want a usage error (exit 2)", err)
	}

	if _, err := sless(t, admin, "logs", "hi", "--tail", "-1"); err == nil || !strings.Contains(err.Error(), "--tail -1") {
		t.Errorf("logs --tail -1: %v", err)
	} else if _, ok := err.(usageError); !ok {
		t.Errorf("logs --tail -1: %T, want a usage error (exit 2)", err)
	}

	closed := "http://127.0.0.1:" + strconv.Itoa(testfn.FreePort(t))
	want := "cannot reach the sless admin API at " + closed + ": is `sless dev` running?"
	for _, args := range [][]string{{"functions"}, {"logs", "hi", "-f"}, {"invoke", "hi"}} {
		if _, err := sless(t, closed, args...); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%v at a closed port: %v, want %q", args, err, want)
		}
	}
}

// describe shows each trigger, what fires it, its state and its error:
// here a queue that does not exist, beside an HTTP trigger that serves and
// a cron trigger switched off.
func TestCLIDescribeTriggers(t *testing.T) {
	requirePython3(t)
	amqptest.Channel(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"q/main.py": "def handle(e):\n    return 'q'\n",
		"q.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: q}\nspec:\n  runtime: python\n  source: ./q\n" +
			"  scale: {initial: 1}\n  triggers:\n    - {name: web, http: {}}\n" +
			"    - {name: nightly, enabled: false, cron: {schedule: \"0 3 * * *\", timezone: Europe/Paris}}\n" +
			"    - {name: orders, rabbitmq: {queue: sless-test-no-such-queue}}\n",
	})
	p, _ := runPlatform(t, dir, "", func(o *local.Options) { o.AMQPURL = amqptest.URL() })
	admin := "http://" + p.AdminAddr()
	var out string
	eventually.TrueWithin(t, 2*time.Minute, "the queue trigger failing", func() bool {
		out, _ = sless(t, admin, "describe", "q")
		return strings.Contains(out, "failing")
	})
	want := regexp.MustCompile(`(?m)^Triggers:\n  NAME +KIND +STATE +SOURCE +ERROR\n` +
		`  web +http +active +- +-\n` +
		`  nightly +cron +disabled +0 3 \* \* \* Europe/Paris +-\n` +
		`  orders +rabbitmq +failing +queue sless-test-no-such-queue +.*queue "sless-test-no-such-queue" not found.*\n`)
	if !want.MatchString(out) {
		t.Errorf("describe does not match %s:\n%s", want, out)
	}
}

// functions says first, on stderr, which manifests did not load; -o json
// has them as the list's errors.
func TestCLIManifestErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"bad.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: bad\n"})
	admin, _ := runDev(t, dir, "")
	t.Setenv("SLESS_ADMIN_TOKEN", "")
	// The admin API answers before the platform's first load of the
	// manifests: an empty table until then.
	var out string
	var err error
	eventually.True(t, "the manifests loaded", func() bool {
		out, err = sless(t, admin, "functions")
		return err != nil || strings.Contains(out, "manifest error")
	})
	if rows := lines(out); err != nil || len(rows) != 2 || !strings.HasPrefix(rows[0], "manifest error: "+filepath.Join(dir, "bad.yaml")+": ") ||
		!strings.HasPrefix(rows[1], "NAME") {
		t.Errorf("functions: %v\n%s\nwant the manifest error, then the table", err, out)
	}
	var list struct {
		Errors []struct{ File, Error string }
	}
	out, err = sless(t, admin, "functions", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Errors) != 1 || list.Errors[0].File != filepath.Join(dir, "bad.yaml") {
		t.Errorf("functions -o json: %v %s, want the manifest's error", err, out)
	}
}

// describe says why a function whose instance never becomes ready does
// not serve: the reason, since when, its last output.
func TestCLIDescribeNeverReady(t *testing.T) {
	requirePython3(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"stuck/main.py": stuckHandler,
		"stuck.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: stuck}\nspec: {runtime: python, source: ./stuck, scale: {initial: 1}}\n"})
	p, _ := runPlatform(t, dir, "", func(o *local.Options) { o.ReadinessGrace = time.Second })
	admin := "http://" + p.AdminAddr()
	// The error names the last output once the runtime has printed it,
	// which a busy machine may take longer to than the readiness grace.
	lastOutput := regexp.MustCompile(`(?m)^Error: +instance default/stuck#\d+ has been running without passing its readiness check since \S+ \(GET /healthz: .*\); last output: loading the model$`)
	var out string
	if !eventually.Holds(time.Minute, func() bool {
		out, _ = sless(t, admin, "describe", "stuck")
		return regexp.MustCompile(`(?m)^State: +crashing$`).MatchString(out) && lastOutput.MatchString(out)
	}) {
		t.Fatalf("describe never said crashing, why, since when and the last output:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^Reason: +ReadinessFailing$`).MatchString(out) {
		t.Errorf("describe does not name the reason ReadinessFailing:\n%s", out)
	}
}

// --admin takes host:port as the server commands do, and says so when it
// is given the invocation port, whose 404s would otherwise read as the
// admin API's "unknown function".
func TestCLIAdminAddress(t *testing.T) {
	p, _ := runPlatform(t, t.TempDir(), "")
	t.Setenv("SLESS_ADMIN_TOKEN", "")
	if out, err := sless(t, p.AdminAddr(), "functions"); err != nil || !strings.HasPrefix(out, "NAME") {
		t.Errorf("--admin %s (no scheme): %v %q, want the table", p.AdminAddr(), err, out)
	}
	for _, invoke := range []string{"http://" + p.Addr(), p.Addr()} {
		for _, args := range [][]string{{"functions"}, {"describe", "hi"}, {"logs", "hi", "-f"}} {
			_, err := sless(t, invoke, args...)
			if err == nil || !strings.Contains(err.Error(), "is not the sless admin API") || !strings.Contains(err.Error(), "invocation port") {
				t.Errorf("%v --admin %s (the invocation port): %v, want it said not the admin API", args, invoke, err)
			}
		}
	}
	for _, bad := range []string{"ftp://" + p.AdminAddr(), "http://", "127.0.0.1:9090?x=1", "localhost", p.AdminAddr() + "/v1", "http://" + p.AdminAddr() + "/v1/"} {
		if _, err := sless(t, bad, "functions"); err == nil || !strings.Contains(err.Error(), "want host:port") {
			t.Errorf("--admin %s: %v, want a usage error", bad, err)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("--admin %s: %T, want a usage error (exit 2)", bad, err)
		}
	}
}

// logs -f prints a line of the stream that only reports dropped lines (as
// sless dev sends at the end of a burst: see local's
// TestLogsFollowSlowFollower) as that report alone.
func TestCLILogsFollowDropReport(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(wire.AdminAPIHeader, wire.AdminAPIVersion)
		_, _ = w.Write([]byte(`{"time":"2026-01-02T03:04:05Z","instance":"default/hi#1","line":"one"}` + "\n" +
			`{"time":"2026-01-02T03:04:06Z","dropped":5}` + "\n"))
	}))
	defer api.Close()
	out, err := sless(t, api.URL, "logs", "hi", "-f")
	if want := "default/hi#1 | one\n(5 lines dropped: reading too slowly)\n"; out != want || err == nil {
		t.Errorf("logs -f: %v %q, want %q and the stream's end", err, out, want)
	}
}

// logs -f ends, with an error that says so, when sless dev stops.
func TestCLILogsFollowEndsWithPlatform(t *testing.T) {
	requirePython3(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"idle.yaml":    "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: idle}\nspec: {runtime: python, source: ./idle, scale: {initial: 0}}\n",
		"idle/main.py": "def handle(e):\n    print('idle served', flush=True)\n    return 'idle'\n",
	})
	admin, stop := runDev(t, dir, "")
	eventually.True(t, "idle known", func() bool { _, err := sless(t, admin, "describe", "idle"); return err == nil })

	var followed syncbuf.Buffer
	ended := make(chan error, 1)
	go func() {
		root := newRootCommand()
		root.SetOut(&followed)
		root.SetArgs([]string{"logs", "idle", "-f", "--admin", admin})
		ended <- root.ExecuteContext(context.Background())
	}()
	eventually.True(t, "a followed line", func() bool {
		_, _ = sless(t, admin, "invoke", "idle")
		return strings.Contains(followed.String(), "default/idle#1 | idle served")
	})
	stop()
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "ended the log stream") {
			t.Errorf("logs -f after sless dev stopped: %v", err)
		}
	case <-time.After(eventually.Within):
		t.Error("logs -f did not end with sless dev")
	}
}

func requirePython3(t *testing.T) {
	t.Helper()
	needs.Commands(t, "python3")
}

// logs -f of a function whose manifest is removed prints the lines it had
// left, then ends saying so, exit 1, instead of waiting on in silence.
func TestCLILogsFollowEndsWithFunction(t *testing.T) {
	requirePython3(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"gone.yaml":    "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: gone}\nspec: {runtime: python, source: ./gone}\n",
		"gone/main.py": "def handle(e):\n    print('gone served', flush=True)\n    return 'gone'\n",
	})
	p, _ := runPlatform(t, dir, "", func(o *local.Options) { o.Poll = 100 * time.Millisecond }) // to see the manifest go
	admin := "http://" + p.AdminAddr()
	eventually.True(t, "gone known", func() bool { _, err := sless(t, admin, "describe", "gone"); return err == nil })

	var followed syncbuf.Buffer
	ended := make(chan error, 1)
	go func() {
		root := newRootCommand()
		root.SetOut(&followed)
		root.SetArgs([]string{"logs", "gone", "-f", "--admin", admin})
		ended <- root.ExecuteContext(context.Background())
	}()
	eventually.True(t, "a followed line", func() bool {
		_, _ = sless(t, admin, "invoke", "gone")
		return strings.Contains(followed.String(), "gone served")
	})
	if err := os.Remove(filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil || err.Error() != "function default/gone was removed: no more lines will come" {
			t.Errorf("logs -f of a removed function: %v", err)
		}
	case <-time.After(eventually.Within):
		t.Error("logs -f did not end with its function")
	}
}

// pseudoTerminal opens a pseudo-terminal (/dev/ptmx) and returns its
// terminal side, its other side read and dropped until the test ends.
func pseudoTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pts.Close() })
	go func() { _, _ = io.Copy(io.Discard, ptmx) }()
	return pts
}
