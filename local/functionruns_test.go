package local

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/runs"
)

const functionRunManifest = `apiVersion: sless.dev/v1alpha1
kind: FunctionRun
metadata: {name: %s}
spec: {function: %s, path: "/?sleep=0", body: {"step": %d}}
---
`

// FunctionRuns in sless dev's manifests are run once each, through the
// platform's runs, what becomes of them said on its output: one run per
// name however often the manifests are read, a changed one refused as an
// immutable object is, one for a function not there yet waiting for it.
func TestFunctionRunsOfManifests(t *testing.T) {
	p := startPlatform(t, manifest("fn", oneFn)+fmt.Sprintf(functionRunManifest, "once", "fn", 1))
	said := regexp.MustCompile(`functionrun default/once: run ([A-Z2-7]{26}) succeeded after 1 attempt\(s\)`)
	eventually.True(t, "the FunctionRun once succeeded", func() bool { return said.MatchString(p.out.String()) })
	id := runs.ID(said.FindStringSubmatch(p.out.String())[1])
	r, err := p.opts.Runs.Get(context.Background(), id)
	if err != nil || r.Function != "fn" || r.State != runs.Succeeded {
		t.Fatalf("its run: %+v %v", r, err)
	}
	if _, res, err := p.opts.Runs.Result(context.Background(), id); err != nil || res.Status != 200 {
		t.Errorf("its answer: %+v %v", res, err)
	}

	write(t, filepath.Join(p.dir, "functions.yaml"), manifest("fn", oneFn)+fmt.Sprintf(functionRunManifest, "once", "fn", 2)+
		fmt.Sprintf(functionRunManifest, "early", "later", 1))
	eventually.True(t, "the changed FunctionRun refused, the early one waiting", func() bool {
		out := p.out.String()
		return strings.Contains(out, "functionrun default/once ("+filepath.Join(p.dir, "functions.yaml")+"): its manifest changed since it was run") &&
			strings.Contains(out, "functionrun default/early (") && strings.Contains(out, "no function default/later to run yet")
	})
	if n := strings.Count(p.out.String(), "functionrun default/once: run "); n != 2 {
		t.Errorf("once was said submitted and ended %d times, want 2 (once each):\n%s", n, p.out.String())
	}
	list, err := p.opts.Runs.List(context.Background(), "default", "fn", runs.Query{})
	if err != nil || len(list) != 1 {
		t.Errorf("fn's runs: %+v %v, want the one", list, err)
	}

	write(t, filepath.Join(p.dir, "functions.yaml"), manifest("fn", oneFn)+manifest("later", oneFn)+
		fmt.Sprintf(functionRunManifest, "early", "later", 1))
	eventually.True(t, "the early FunctionRun ran once its function came", func() bool {
		return regexp.MustCompile(`functionrun default/early: run [A-Z2-7]{26} succeeded`).MatchString(p.out.String())
	})
}
