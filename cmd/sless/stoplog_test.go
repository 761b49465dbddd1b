package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// The Lease released on a graceful stop is information; any other error
// after the stop, or the same message with another error, stays an error.
func TestStopQuiet(t *testing.T) {
	var out bytes.Buffer
	log := logr.New(stopQuiet{logr.FromSlogHandler(slog.NewJSONHandler(&out, nil)).GetSink()}).WithName("manager")
	log.Error(errors.New("leader election lost"), "error received after stop sequence was engaged")
	log.Error(errors.New("cache sync failed"), "error received after stop sequence was engaged")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"INFO"`) || !strings.Contains(lines[1], `"level":"ERROR"`) {
		t.Errorf("logged:\n%s\nwant the released Lease at INFO, the other error at ERROR", out.String())
	}
}
