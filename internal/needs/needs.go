// Package needs decides, for every test that needs a service or a command,
// whether its absence fails the test (in CI) or skips it (elsewhere, naming
// what is missing). One decision for all: a test that skipped in CI
// because its helper read CI another way would pass without running.
package needs

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run in CI: the variable CI set to anything
// but "", "0" or "false" (CI systems set "true" or "1").
func CI() bool { return isCI(os.Getenv("CI")) }

func isCI(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false":
		return false
	}
	return true
}

// Missing fails the test in CI and skips it elsewhere, saying what is
// missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("needed in CI, missing: %s", what)
	}
	t.Skipf("skipped, missing: %s", what)
}

// Commands requires every named command on PATH.
func Commands(t testing.TB, names ...string) {
	t.Helper()
	var missing []string
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		Missing(t, "%s, not on PATH", strings.Join(missing, ", "))
	}
}
