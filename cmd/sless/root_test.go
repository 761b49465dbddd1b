package main

import (
	"bytes"
	"strings"
	"testing"
)

func run(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run("version")
	if err != nil || !strings.HasPrefix(out, "sless ") {
		t.Fatalf("sless version = %q, %v; want a line starting with \"sless \"", out, err)
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	out, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"dev", "controller", "activator", "autoscaler", "queue-proxy", "version"} {
		if !strings.Contains(out, "\n  "+sub+" ") {
			t.Errorf("--help does not list %q:\n%s", sub, out)
		}
	}
}

func TestUnknownCommandFails(t *testing.T) {
	if _, err := run("frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Fatalf("sless frobnicate = %v, want an unknown command error", err)
	}
}
