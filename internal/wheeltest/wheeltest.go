// Package wheeltest builds pure-Python wheels for tests: a requirements.txt
// can name one by path, so dependencies install without a package index.
package wheeltest

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Build writes the wheel of package name version 1.0 holding files (path
// in the wheel → content) and returns its path.
func Build(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	info := name + "-1.0.dist-info/"
	all := map[string]string{
		info + "METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n",
		info + "WHEEL":    "Wheel-Version: 1.0\nGenerator: sless-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for path, content := range files {
		all[path] = content
	}
	var record strings.Builder
	for path, content := range all {
		sum := sha256.Sum256([]byte(content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
	}
	record.WriteString(info + "RECORD,,\n")
	all[info+"RECORD"] = record.String()
	path := filepath.Join(t.TempDir(), name+"-1.0-py3-none-any.whl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, content := range all {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, content); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
