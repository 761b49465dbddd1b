package devharness

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"sless.dev/sless/local"
)

// InProcess is `sless dev` run in the benchmark's own process, on free
// loopback ports.
type InProcess struct {
	*local.Platform
	functions int
	stop      func()
}

// inProcessPoll is how often an InProcess's states are read: a read is a
// call, cheap.
const inProcessPoll = 50 * time.Millisecond

// StartInProcess runs the platform on o's functions, in a directory named
// for the benchmark, until Stop: Wait for its functions. more is what
// else the platform is given (a broker, a records store, its instances'
// log); the harness sets its directory, addresses, cache, drain and
// polling, and its own log and output where more has none (none, and
// standard error).
func StartInProcess(ctx context.Context, benchmark string, o Options, more local.Options) (*InProcess, error) {
	r, err := newRun(benchmark, o)
	if err != nil {
		return nil, err
	}
	lo := more
	lo.Dir, lo.CacheDir, lo.Listen, lo.Admin = r.functions, r.cache, "127.0.0.1:0", "127.0.0.1:0"
	lo.AllowExternalSources, lo.Drain = o.AllowExternalSources, o.Drain
	lo.Poll = time.Hour // the manifests do not change during a benchmark
	if lo.Log == nil {
		lo.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if lo.Out == nil {
		lo.Out = os.Stderr
	}
	p, err := local.New(lo)
	if err != nil {
		os.RemoveAll(r.dir)
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	return &InProcess{Platform: p, functions: len(o.Functions),
		stop: func() { cancel(); <-done; os.RemoveAll(r.dir) }}, nil
}

// Wait polls the platform until every function satisfies ok, for at most
// within; a failed or crashing function ends the wait.
func (p *InProcess) Wait(ctx context.Context, within time.Duration, ok func(local.FunctionStatus) bool) error {
	list := func(context.Context) ([]local.FunctionStatus, error) { return p.Functions(), nil }
	return waitAll(ctx, list, p.functions, inProcessPoll, within, ok)
}

// Stop stops the platform (it drains, then stops its instances) and
// removes the run's directory.
func (p *InProcess) Stop() { p.stop() }
