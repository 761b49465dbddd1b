package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/testfn"
)

// Bad input is a clear error and exit status 2, before anything is sent.
func TestLoadBadInput(t *testing.T) {
	dead := "http://127.0.0.1:" + strconv.Itoa(testfn.FreePort(t)) + "/"
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

// `sless load` against the Go hello through a real sless dev: 2,000
// requests a second for 5 s arrive at that rate, the run ends on time, the
// platform's instances are sampled, and the --json files of two runs
// compare.
func TestLoadAgainstDev(t *testing.T) {
	needs.Commands(t, "go")
	hello, err := filepath.Abs("../../config/samples/functions/hello-go")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"hello.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: hello}\n" +
		"spec: {runtime: go, source: " + hello + ", handler: Handle, scale: {initial: 1}}\n"})
	d := startDevIn(t, dir, nil, "--allow-external-sources")
	url := d.invoke + "/fn/default/hello"
	eventually.TrueWithin(t, 2*time.Minute, "hello answers", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	a, b := filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")
	start := time.Now()
	out, err := run("load", url, "--rate", "2000", "-d", "5s", "-c", "100", "--admin", d.admin, "--json", a)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("sless load: %v\n%s", err, out)
	}
	r := readLoadRun(t, a)
	rate := float64(r.Result.Requests) / 5
	if rate < 1960 || rate > 2040 || r.Result.Codes[200] != r.Result.Requests || r.Result.Errors != 0 {
		t.Errorf("%.0f answers a second (codes %v, %d errors), want 2000 within 2%%, all 200", rate, r.Result.Codes, r.Result.Errors)
	}
	if took > 7*time.Second {
		t.Errorf("a 5 s run took %v", took)
	}
	if len(r.Platform) < 3 || r.Platform[0].Ready != 1 {
		t.Errorf("platform samples %+v, want one a second with the ready instance", r.Platform)
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

func readLoadRun(t *testing.T, file string) loadRun {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r loadRun
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}
