package needs

import "testing"

// Every CI system's way of saying so counts: a test helper that read only
// "true" would skip under CI=1 instead of failing.
func TestIsCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "FALSE": false,
		"true": true, "1": true, "yes": true, "True": true} {
		if got := isCI(v); got != want {
			t.Errorf("CI=%q: isCI = %v, want %v", v, got, want)
		}
	}
}
