package manifests

import (
	"errors"
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

	fns, errs := Load(dir, LoadOptions{})
	var keys []string
	for _, fn := range fns {
		keys = append(keys, fn.Key().String())
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
	if _, errs := Load(filepath.Join(t.TempDir(), "nope"), LoadOptions{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "functions directory") {
		t.Errorf("errors %v, want one naming the functions directory", errs)
	}
}

// manifest is a Function manifest with spec.source and extra spec fields.
func manifest(source, spec string) string {
	return "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: f}\nspec: {runtime: go, source: " + source + spec + "}\n"
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestLoadExternalSources(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "fns")
	outside := filepath.Join(root, "outside")
	write(t, filepath.Join(dir, "hello", "main.go"), "package main\n")
	write(t, filepath.Join(outside, "main.go"), "package main\n")
	write(t, filepath.Join(root, "fns-evil", "main.go"), "package main\n") // shares dir's name as a prefix
	symlink(t, outside, filepath.Join(dir, "link"))
	symlink(t, "hello", filepath.Join(dir, "alias"))
	symlink(t, dir, filepath.Join(root, "fnslink"))
	viaLink := filepath.Join(root, "fnslink")

	tests := []struct {
		name, dir, source string
		allow             bool
		want              string // SourceDir; "" when refused
	}{
		{"relative inside", dir, "./hello", false, filepath.Join(dir, "hello")},
		{"the directory itself", dir, ".", false, dir},
		{"absolute inside", dir, filepath.Join(dir, "hello"), false, filepath.Join(dir, "hello")},
		{"out and back in", dir, "../fns/hello", false, filepath.Join(dir, "hello")},
		{"link to inside", dir, "./alias", false, filepath.Join(dir, "alias")},
		{"directory reached through a link", viaLink, "./hello", false, filepath.Join(viaLink, "hello")},
		{"parent", dir, "..", false, ""},
		{"relative outside", dir, "../outside", false, ""},
		{"sibling sharing the prefix", dir, "../fns-evil", false, ""},
		{"absolute outside", dir, outside, false, ""},
		{"link to outside", dir, "./link", false, ""},
		{"outside through a linked directory", viaLink, "../outside", false, ""},
		{"relative outside allowed", dir, "../outside", true, outside},
		{"absolute outside allowed", dir, outside, true, outside},
		{"link to outside allowed", dir, "./link", true, filepath.Join(dir, "link")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write(t, filepath.Join(dir, "f.yaml"), manifest(tt.source, ""))
			fns, errs := Load(tt.dir, LoadOptions{AllowExternalSources: tt.allow})
			if tt.want != "" {
				if len(errs) > 0 || len(fns) != 1 || fns[0].SourceDir != tt.want {
					t.Fatalf("loaded %v with errors %v, want one function from %s", fns, errs, tt.want)
				}
				return
			}
			if len(fns) != 0 || len(errs) != 1 {
				t.Fatalf("loaded %v with errors %v, want one error and no function", fns, errs)
			}
			msg := errs[0].Error()
			for _, want := range []string{
				filepath.Join(tt.dir, "f.yaml") + ": ",
				`spec.source "` + tt.source + `": outside the manifests directory ` + tt.dir + " ",
				"--allow-external-sources",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q, want it to contain %q", msg, want)
				}
			}
		})
	}
}

func TestLoadTypeErrors(t *testing.T) {
	tests := []struct {
		name, manifest string
		want           []string // one per field error
	}{
		{"one", manifest("./hello", `, concurrency: "x"`), []string{
			`spec.concurrency: Invalid value: "x": must be of type int32`,
		}},
		{"two", manifest("./hello", `, concurrency: "x", timeoutSeconds: "y"`), []string{
			`spec.concurrency: Invalid value: "x": must be of type int32`,
			`spec.timeoutSeconds: Invalid value: "y": must be of type int32`,
		}},
		{"nested, in lists and maps", `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: f, labels: {team: 7}}
spec:
  runtime: go
  source: ./hello
  scale: {max: many, window: soon}
  env: [{name: A, value: "1"}, {name: B, value: [2]}]
  triggers: [{name: t, cron: {schedule: true}}]
`, []string{
			`metadata.labels[team]: Invalid value: 7: must be of type string`,
			`spec.env[1].value: Invalid value: [2]: must be of type string`,
			`spec.scale.max: Invalid value: "many": must be of type int32`,
			`spec.scale.window: Invalid value: "soon": time: invalid duration "soon"`,
			`spec.triggers[0].cron.schedule: Invalid value: true: must be of type string`,
		}},
		{"wrong kind", manifest("./hello", `, scale: [1], concurrency: 1.5`), []string{
			`spec.concurrency: Invalid value: 1.5: must be of type int32`,
			`spec.scale: Invalid value: [1]: must be of type object`,
		}},
		{"unknown field", manifest("./hello", `, concurency: 1`), []string{
			`unknown field "spec.concurency"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "hello", "main.go"), "package main\n")
			write(t, filepath.Join(dir, "f.yaml"), tt.manifest)
			fns, errs := Load(dir, LoadOptions{})
			if len(fns) != 0 || len(errs) != 1 {
				t.Fatalf("loaded %v with errors %v, want one error and no function", fns, errs)
			}
			msg := errs[0].Error()
			if !strings.HasPrefix(msg, filepath.Join(dir, "f.yaml")+": ") {
				t.Errorf("error %q does not name the file", msg)
			}
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q, want it to contain %q", msg, want)
				}
			}
			n := 1
			var agg interface{ Errors() []error }
			if errors.As(errs[0], &agg) {
				n = len(agg.Errors())
			}
			if n != len(tt.want) {
				t.Errorf("error %q holds %d errors, want %d", msg, n, len(tt.want))
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "hello", "main.py"), "def handle(e): return 'hi'\n")
	write(t, filepath.Join(dir, "f.yaml"), hello)
	fingerprint := func() string {
		t.Helper()
		fns, errs := Load(dir, LoadOptions{})
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
