package runtimes

import (
	"slices"
	"testing"
)

// A command's $(NAME)s expand as Kubernetes expands a container's: by
// the environment given, the last entry of a name counting; $$ is a $;
// an unknown name or an unclosed reference stays as written.
func TestExpand(t *testing.T) {
	env := []string{"PORT=1", "GREETING=hi there", "PORT=8080", "EMPTY="}
	for _, tt := range []struct{ in, want string }{
		{"server.js", "server.js"},
		{"$(PORT)", "8080"},
		{"--port=$(PORT)", "--port=8080"},
		{"$(GREETING), $(PORT)!", "hi there, 8080!"},
		{"$(EMPTY)x", "x"},
		{"$(NOPE)", "$(NOPE)"},
		{"$$(PORT)", "$(PORT)"},
		{"$$$(PORT)", "$8080"},
		{"cost: 5$", "cost: 5$"},
		{"$PORT", "$PORT"},
		{"$(PORT", "$(PORT"},
	} {
		if got := Expand([]string{tt.in}, env); !slices.Equal(got, []string{tt.want}) {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	args := []string{"a", "b"}
	if got := Expand(args, env); &got[0] != &args[0] {
		t.Error("Expand copied arguments without a reference")
	}
}
