// Package devharness runs `sless dev` under a benchmark, so that each
// benchmark says what it measures and not how the platform comes and goes:
// it writes the benchmark's Function manifests into a directory of the
// run's own, starts the platform on free loopback ports, waits until every
// function is in the state the benchmark needs, and stops it, leaving no
// directory and no instance behind.
//
// The platform runs in the benchmark's process (InProcess), where its
// functions' states are read directly, or as the sless binary's own
// process (Process), when that process is what is measured (its CPU, its
// memory, its /metrics); then its states are read from the admin API.
package devharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/local"
)

// Options is what both ways of running sless dev are given.
type Options struct {
	// Functions are written as one manifest file, functions.yaml.
	Functions []Manifest
	// Files are written beside the manifests, by path relative to them:
	// sources that live in the manifests' directory.
	Files map[string]string
	// CacheDir keeps builds between runs; empty, the run has its own,
	// removed with it.
	CacheDir string
	// AllowExternalSources serves manifests whose sources lie outside
	// their directory, as the samples do.
	AllowExternalSources bool
	// Drain bounds the drain at exit (sless dev's default when 0).
	Drain time.Duration
}

// Manifest is one Function manifest. Scale and each of Triggers are YAML
// flow maps, as a manifest has them: "{initial: 0, max: 1, window: 1h}".
type Manifest struct {
	Namespace string // "" is the default namespace
	Name      string
	Runtime   v1alpha1.Runtime
	Source    string // a directory: absolute, or relative to the manifests
	Handler   string // "" is the runtime's default
	Scale     string
	Triggers  []string
}

// manifest is f as a YAML document, ended by its separator.
func (f Manifest) manifest() string {
	var b strings.Builder
	meta := "name: " + f.Name
	if f.Namespace != "" {
		meta += ", namespace: " + f.Namespace
	}
	fmt.Fprintf(&b, "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {%s}\nspec:\n  runtime: %s\n  source: %s\n",
		meta, f.Runtime, f.Source)
	if f.Handler != "" {
		fmt.Fprintf(&b, "  handler: %s\n", f.Handler)
	}
	if f.Scale != "" {
		fmt.Fprintf(&b, "  scale: %s\n", f.Scale)
	}
	if len(f.Triggers) > 0 {
		b.WriteString("  triggers:\n")
		for _, t := range f.Triggers {
			fmt.Fprintf(&b, "    - %s\n", t)
		}
	}
	b.WriteString("---\n")
	return b.String()
}

// run is the directory of one run of sless dev: the manifests and Files
// under functions/, the cache under cache/ unless the options name one,
// and whatever else the run writes there (its output, the benchmark's
// own files). Every instance's command line names the cache, which is
// how instances left behind are found (see Process.Stop).
type run struct {
	dir, functions, cache string
}

// newRun makes a run's directory, named for the benchmark.
func newRun(name string, o Options) (run, error) {
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		return run{}, err
	}
	r := run{dir: dir, functions: filepath.Join(dir, "functions"), cache: o.CacheDir}
	if r.cache == "" {
		r.cache = filepath.Join(dir, "cache")
	}
	if err := r.write(o); err != nil {
		os.RemoveAll(dir)
		return run{}, err
	}
	return r, nil
}

func (r run) write(o Options) error {
	var docs strings.Builder
	for _, f := range o.Functions {
		docs.WriteString(f.manifest())
	}
	files := map[string]string{"functions.yaml": docs.String()}
	for path, content := range o.Files {
		files[path] = content
	}
	for path, content := range files {
		file := filepath.Join(r.functions, path)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Idle is a function prepared and at zero: a request to it is a cold
// start.
func Idle(st local.FunctionStatus) bool { return st.State == adminapi.StateIdle }

// Prepared is a function built and able to run, whatever its instances:
// idle, starting or ready. A function that cron pre-warms is never idle
// for long, and several of them may never be idle at one moment.
func Prepared(st local.FunctionStatus) bool {
	switch st.State {
	case adminapi.StateIdle, adminapi.StateStarting, adminapi.StateReady:
		return true
	}
	return false
}

// ReadyWith is a function ready with n instances.
func ReadyWith(n int) func(local.FunctionStatus) bool {
	return func(st local.FunctionStatus) bool { return st.State == adminapi.StateReady && st.Ready == n }
}

// waitAll polls list every poll until n functions satisfy ok, for at most
// within. A failed function (nothing to run) or a crashing one ends the
// wait: it would not come.
func waitAll(ctx context.Context, list func(context.Context) ([]local.FunctionStatus, error), n int,
	poll, within time.Duration, ok func(local.FunctionStatus) bool) error {
	deadline := time.Now().Add(within)
	have := 0
	for {
		sts, err := list(ctx)
		if err == nil {
			have = 0
			for _, st := range sts {
				if st.State == adminapi.StateFailed || st.State == adminapi.StateCrashing {
					return fmt.Errorf("%s/%s: %s: %s", st.Namespace, st.Name, st.State, st.Error)
				}
				if ok(st) {
					have++
				}
			}
			if have == n {
				return nil
			}
		}
		if time.Now().After(deadline) && err != nil {
			return fmt.Errorf("the functions' states, after %v: %w", within, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d functions as wanted after %v", have, n, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
