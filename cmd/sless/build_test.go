package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sless.dev/sless/internal/needs"
	"sless.dev/sless/ociimage"
)

// Bad command lines of build and deploy are usage errors (exit 2) that
// say what to give, before anything is built.
func TestBuildBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no runtime", []string{"build", dir, "-o", "x.tar"}, "--runtime go, python or node"},
		{"an unknown runtime", []string{"build", dir, "--runtime", "ruby", "-o", "x.tar"}, "--runtime go, python or node"},
		{"no output", []string{"build", dir, "--runtime", "go"}, "one of --push IMAGE or --output FILE"},
		{"two outputs", []string{"build", dir, "--runtime", "go", "--push", "r/x", "-o", "x.tar"}, "one of --push IMAGE or --output FILE"},
		{"a bad base", []string{"build", dir, "--runtime", "go", "-o", "x.tar", "--base", "python"}, "want RUNTIME=IMAGE"},
		{"-f with a directory", []string{"build", "-f", dir, dir, "--registry", "r"}, "give no DIR"},
		{"-f without a destination", []string{"build", "-f", dir}, "--registry to push to or --output"},
		{"deploy without a registry", []string{"deploy", "-f", dir, "--registry", ""}, "--registry"},
		{"deploy without manifests", []string{"deploy", "--registry", "r"}, "-f FILE|DIR"},
		{"a tag with --push", []string{"build", dir, "--runtime", "go", "--push", "r/x", "-t", "r/x:1"}, "--tag names the archive of one function"},
		{"a tag with -f", []string{"build", "-f", dir, "-o", dir, "-t", "r/x:1"}, "--tag names the archive of one function"},
		{"a bad tag", []string{"build", dir, "--runtime", "go", "-o", "x.tar", "-t", "Bad Name"}, `--tag "Bad Name": want REPOSITORY:TAG`},
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

// archiveIndex is the index.json of an OCI archive.
func archiveIndex(t *testing.T, archive string) (index struct {
	Manifests []struct{ Annotations map[string]string }
}) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for tr := tar.NewReader(f); ; {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no index.json in %s: %v", archive, err)
		}
		if h.Name == "index.json" {
			if err := json.NewDecoder(tr).Decode(&index); err != nil {
				t.Fatal(err)
			}
			return index
		}
	}
}

// sless build writes a Go sample's image as an OCI archive, named for
// containerd's import: localhost/default/NAME:<digest> unless --tag says.
func TestBuildArchive(t *testing.T) {
	needs.Commands(t, "go")
	archive := filepath.Join(t.TempDir(), "hello.tar")
	out, err := run("build", "../../config/samples/functions/hello-go", "--runtime", "go", "--handler", "Handle",
		"--cache-dir", t.TempDir(), "-o", archive)
	if err != nil {
		t.Fatalf("sless build: %v\n%s", err, out)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	for tr := tar.NewReader(f); ; {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	if !names["oci-layout"] || !names["index.json"] || !strings.Contains(out, archive) {
		t.Errorf("the archive holds %v; output %q", names, out)
	}
	index := archiveIndex(t, archive)
	want := regexp.MustCompile(`^localhost/default/hello-go:[0-9a-f]{12}$`)
	if len(index.Manifests) != 1 || !want.MatchString(index.Manifests[0].Annotations["io.containerd.image.name"]) ||
		!strings.Contains(out, index.Manifests[0].Annotations["io.containerd.image.name"]) {
		t.Errorf("the archive's index %+v, printed %q: want it named %s, and the name printed", index, out, want)
	}

	out, err = run("build", "../../config/samples/functions/hello-go", "--runtime", "go", "--handler", "Handle",
		"--cache-dir", t.TempDir(), "-o", archive, "-t", "hello:v1")
	index = archiveIndex(t, archive)
	if err != nil || len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/library/hello:v1" ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" || !strings.HasSuffix(out, "\thello:v1\n") {
		t.Errorf("build -t hello:v1: %v, printed %q, index %+v", err, out, index)
	}
}

// build -f builds every function before it writes any archive: each
// failure is reported, its function named once, and nothing is written;
// an --output that is a file is the flag at fault. A manifest's problems
// are reported at once, unknown fields beside the others, one a line.
func TestBuildManifestsReportsEverything(t *testing.T) {
	needs.Commands(t, "python3")
	dir := t.TempDir()
	for name, content := range map[string]string{
		"good/main.py":   "def handle(event):\n    return 1\n",
		"broken/main.py": "def handle(event)\n",
		"absent/main.py": "def other(event):\n    return 1\n",
		"functions.yaml": "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: good}\nspec: {runtime: python, source: ./good}\n" +
			"---\napiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: broken}\nspec: {runtime: python, source: ./broken}\n" +
			"---\napiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: absent}\nspec: {runtime: python, source: ./absent}\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := filepath.Join(t.TempDir(), "base") // the good one's: no registry here
	static, err := ociimage.Static()
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteLayout(base, static, "v1"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "archives")
	_, err = run("build", "-f", dir, "-o", out, "--cache-dir", t.TempDir(), "--base", "python="+base+":v1")
	msg := fmt.Sprint(err)
	for _, want := range []string{"2 of 3 functions failed to build, no archive written", "python handler main.handle of default/broken",
		"SyntaxError", "python handler main.handle of default/absent", "has no function 'handle'"} {
		if !strings.Contains(msg, want) {
			t.Errorf("build -f of two broken functions: %v\nwant %q in it", err, want)
		}
	}
	if n := strings.Count(msg, "default/broken"); n != 1 {
		t.Errorf("default/broken is named %d times:\n%s", n, msg)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the archives' directory after a failed build: %v, want none", err)
	}

	file := filepath.Join(t.TempDir(), "archive.tar")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var u usageError
	if _, err := run("build", "-f", dir, "-o", file); !errors.As(err, &u) || !strings.Contains(err.Error(), "--output "+file+" is a file") {
		t.Errorf("build -f -o FILE: %v, want a usage error naming --output", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: bad}\n"+
		"spec: {runtime: python, source: ., colour: red, timeoutSeconds: -1, scale: {min: 5, max: 2}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run("build", "-f", bad, "-o", out)
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != 4 || lines[0] != "3 problems in the manifests, nothing done:" || !strings.Contains(lines[1], `unknown field "spec.colour"`) ||
		!strings.Contains(err.Error(), "spec.timeoutSeconds") || !strings.Contains(err.Error(), "spec.scale.min") || !strings.HasPrefix(lines[2], "  "+bad+": function default/bad: ") {
		t.Errorf("build -f of a manifest with three problems:\n%v", err)
	}
	if _, err := run("build", "-f", strings.Replace(bad, "bad.yaml", "none.yaml", 1), "-o", out); err == nil {
		t.Error("build -f of a missing manifest succeeded")
	}
}

// Without --base or a base registry, a build takes the runtime bases
// `make images` wrote beside the sless binary (bin/images); without them,
// its error says how to have one.
func TestBuildLocalBases(t *testing.T) {
	needs.Commands(t, "python3")
	t.Setenv("SLESS_BASE_REGISTRY", "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.py"), []byte("def handle(event):\n    return 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "py.tar")
	// A base registry that cannot answer: the local bases are the default
	// only when no registry is named.
	_, err = run("build", src, "--runtime", "python", "-o", archive, "--cache-dir", t.TempDir(), "--base-registry", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "make images writes the bases; --base python=IMAGE or --base-registry names another") {
		t.Errorf("a build with an unreachable base registry: %v, want how to have a base", err)
	}
	images := filepath.Join(filepath.Dir(exe), "images")
	if _, err := os.Stat(images); err == nil {
		t.Fatalf("%s exists: the test binary's directory is not its own", images)
	}
	t.Cleanup(func() { _ = os.RemoveAll(images) })
	static, err := ociimage.Static()
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteLayout(filepath.Join(images, "runtime-python"), static, "latest"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("build", src, "--runtime", "python", "-o", archive, "--cache-dir", t.TempDir()); err != nil {
		t.Errorf("a build with the bases beside the binary: %v", err)
	}
}
