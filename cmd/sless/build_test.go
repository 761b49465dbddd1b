package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/internal/needs"
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

// sless build writes a Go sample's image as an OCI archive.
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
}
