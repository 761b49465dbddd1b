package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/syncbuf"
)

// sless runs the CLI in this process against d's admin API and returns its
// output and error.
func sless(t *testing.T, d *devProcess, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--admin", d.admin))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// The CLI against a real sless dev: every command's table and JSON.
func TestCLI(t *testing.T) {
	d := startDevWith(t, nil)

	out, err := sless(t, d, "functions")
	if err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, "default/hi") || !strings.Contains(out, "/2 ") {
		t.Errorf("functions: %v\n%s", err, out)
	}
	out, err = sless(t, d, "functions", "-o", "json")
	var list struct{ Functions []map[string]any }
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Functions) != 1 {
		t.Errorf("functions -o json: %v\n%s", err, out)
	}

	body := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(body, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = sless(t, d, "invoke", "default/hi", "-d", "@"+body, "-H", "X-Test: yes", "some/path")
	if err != nil || !strings.Contains(out, "200 OK in") || !strings.HasSuffix(out, "hi\n") {
		t.Errorf("invoke: %v\n%s", err, out)
	}
	if _, err := sless(t, d, "invoke", "default/nobody"); err == nil || !strings.Contains(err.Error(), "unknown function default/nobody") {
		t.Errorf("invoke of an unknown function: %v", err)
	}

	out, err = sless(t, d, "describe", "hi") // the default namespace
	for _, want := range []string{"Name:", "default/hi", "State:", "ready", "Instances:", "default/hi#", "Recent invocations:", "  http     200"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("describe lacks %q: %v\n%s", want, err, out)
		}
	}
	out, err = sless(t, d, "invocations", "default/hi", "--json")
	if err != nil || !strings.Contains(out, `"invocations":[{`) {
		t.Errorf("invocations --json: %v\n%s", err, out)
	}

	out, err = sless(t, d, "logs", "default/hi")
	if err != nil || !strings.Contains(out, "| serving /some/path") {
		t.Errorf("logs: %v\n%s", err, out)
	}
	var followed syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := newRootCommand()
		root.SetOut(&followed)
		root.SetArgs([]string{"logs", "default/hi", "-f", "--tail", "1", "--admin", d.admin})
		done <- root.ExecuteContext(ctx)
	}()
	eventually.True(t, "a followed line", func() bool {
		_, _ = sless(t, d, "invoke", "default/hi", "followed")
		return strings.Contains(followed.String(), "| serving /followed")
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("logs -f: %v", err)
	}
}
