// Package needs lets a test say which commands it runs: missing ones fail
// the test in CI (CI set), and skip it elsewhere, naming them.
package needs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Commands requires every named command on PATH.
func Commands(t testing.TB, names ...string) {
	t.Helper()
	var missing []string
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this test needs %s, missing in CI", strings.Join(missing, ", "))
	}
	t.Skipf("this test needs %s, not found", strings.Join(missing, ", "))
}
