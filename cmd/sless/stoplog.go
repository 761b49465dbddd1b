package main

import (
	"github.com/go-logr/logr"
)

// stopQuiet is a manager's log sink, but for the one error
// controller-runtime logs on every graceful stop of a manager with leader
// election: releasing the Lease on the way out comes back as "leader
// election lost" (kubernetes-sigs/controller-runtime#3535, fixed after
// v0.25). It is logged as information: nothing went wrong.
type stopQuiet struct{ logr.LogSink }

func (s stopQuiet) Error(err error, msg string, kv ...any) {
	if msg == "error received after stop sequence was engaged" && err != nil && err.Error() == "leader election lost" {
		s.LogSink.Info(0, "leader election released on stop", kv...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s stopQuiet) WithValues(kv ...any) logr.LogSink { return stopQuiet{s.LogSink.WithValues(kv...)} }
func (s stopQuiet) WithName(name string) logr.LogSink { return stopQuiet{s.LogSink.WithName(name)} }
