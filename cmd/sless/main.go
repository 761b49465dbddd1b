// Command sless is the one binary of the sless platform. Its subcommands run
// the local platform (dev) and each component of the Kubernetes deployment
// (controller, activator, autoscaler, queue-proxy) from the same image.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		os.Exit(1)
	}
}
