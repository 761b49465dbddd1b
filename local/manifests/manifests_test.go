package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const hello = `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: hello}
spec: {runtime: python, source: ./hello}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: other, namespace: team}
spec: {runtime: node, source: ./hello, concurrency: 2}
`

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "hello", "main.py"), "def handle(e): return 'hi'\n")
	write(t, filepath.Join(dir, "hello", "config.yaml"), "not: a manifest\n")
	write(t, filepath.Join(dir, "a.yaml"), hello)
	write(t, filepath.Join(dir, "README.md"), "ignored")
	write(t, filepath.Join(dir, "bad-field.yml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: bad}
spec: {runtime: python, source: ./hello, concurrency: -1}
`)
	write(t, filepath.Join(dir, "no-source.yaml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: nosrc}
spec: {runtime: go, source: ./missing}
`)
	write(t, filepath.Join(dir, "typo.yaml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: typo}
spec: {runtime: go, source: ./hello, concurency: 1}
`)
	write(t, filepath.Join(dir, "z-dup.yaml"), hello[:strings.Index(hello, "---")])

	fns, errs := Load(dir)
	var keys []string
	for _, fn := range fns {
		keys = append(keys, fn.Key())
		if fn.SourceDir != filepath.Join(dir, "hello") {
			t.Errorf("%s: source dir %q", fn.Key(), fn.SourceDir)
		}
		if fn.Spec.TimeoutSeconds == 0 {
			t.Errorf("%s: not defaulted", fn.Key())
		}
	}
	if got := strings.Join(keys, ","); got != "default/hello,team/other" {
		t.Errorf("loaded %s, want default/hello,team/other", got)
	}
	wantErrs := []struct{ file, text string }{
		{"bad-field.yml", "spec.concurrency"},
		{"no-source.yaml", "spec.source"},
		{"typo.yaml", "concurency"},
		{"z-dup.yaml", "already defined in " + filepath.Join(dir, "a.yaml")},
	}
	if len(errs) != len(wantErrs) {
		t.Fatalf("errors %v, want %d", errs, len(wantErrs))
	}
	for i, want := range wantErrs {
		msg := errs[i].Error()
		if !strings.HasPrefix(msg, filepath.Join(dir, want.file)+": ") || !strings.Contains(msg, want.text) {
			t.Errorf("error %d = %q, want it to name %s and %q", i, msg, want.file, want.text)
		}
	}
}

func TestLoadMissingDir(t *testing.T) {
	if _, errs := Load(filepath.Join(t.TempDir(), "nope")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "functions directory") {
		t.Errorf("errors %v, want one naming the functions directory", errs)
	}
}

func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "hello", "main.py"), "def handle(e): return 'hi'\n")
	write(t, filepath.Join(dir, "f.yaml"), hello)
	fingerprint := func() string {
		t.Helper()
		fns, errs := Load(dir)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		fp, err := Fingerprint(fns[0])
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	base := fingerprint()
	if again := fingerprint(); again != base {
		t.Fatal("fingerprint changed with nothing changed")
	}
	// Changes outside the source proper leave it alone.
	write(t, filepath.Join(dir, "hello", "node_modules", "x", "index.js"), "x")
	write(t, filepath.Join(dir, "hello", "__pycache__", "main.pyc"), "x")
	if fp := fingerprint(); fp != base {
		t.Error("fingerprint changed with installed dependencies")
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "hello", "main.py"), later, later); err != nil {
		t.Fatal(err)
	}
	edited := fingerprint()
	if edited == base {
		t.Error("fingerprint unchanged after a source edit")
	}
	write(t, filepath.Join(dir, "f.yaml"), strings.Replace(hello, "source: ./hello}", "source: ./hello, timeoutSeconds: 5}", 1))
	if fp := fingerprint(); fp == edited {
		t.Error("fingerprint unchanged after a spec edit")
	}
}
