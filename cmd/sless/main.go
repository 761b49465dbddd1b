// Command sless is the one binary of the sless platform. Its subcommands run
// the local platform (dev) and each component of the Kubernetes deployment
// (controller, activator, autoscaler, queue-proxy) from the same image.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	// Registered before any work, so no signal is missed: the first starts
	// a graceful stop, the next ends the process at once, as an unhandled
	// one would. (Restoring the default handling from a goroutine after the
	// first could lose a second signal sent before that goroutine ran.)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		sig := <-signals
		signal.Reset()
		if self, err := os.FindProcess(os.Getpid()); err == nil {
			_ = self.Signal(sig)
		}
	}()
	err := newRootCommand().ExecuteContext(ctx)
	signal.Stop(signals)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		if _, ok := errors.AsType[usageError](err); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line that cannot be run as given: exit status 2,
// as for a flag that does not parse.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
