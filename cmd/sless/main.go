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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful stop; the next one, with the
		// default handling restored, ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := newRootCommand().ExecuteContext(ctx)
	stop()
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
