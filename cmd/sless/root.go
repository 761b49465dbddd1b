package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=..."; without
// it the module version or VCS revision recorded by the Go toolchain is used.
var version = ""

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sless",
		Short: "sless runs functions with Knative-style autoscaling, on Kubernetes or locally",
		Long: `sless is a serverless platform for Kubernetes. A Function resource becomes a
Deployment with a queue-proxy sidecar behind the activator, scaled by the
sless autoscaler (or KEDA) on HTTP load, queue depth and cron schedules.
"sless dev" runs the whole platform on one machine without a cluster.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCommand(),
		newDevCommand(),
		newControllerCommand(),
		newActivatorCommand(),
		newAutoscalerCommand(),
		newQueueProxyCommand(),
		newFunctionsCommand(),
		newDescribeCommand(),
		newLogsCommand(),
		newInvokeCommand(),
		newInvocationsCommand(),
		newRunsCommand(),
		newRunCommand(),
		newLoadCommand(),
		newBuildCommand(),
		newDeployCommand(),
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	for _, c := range root.Commands() {
		asUsage(c)
	}
	return root
}

// asUsage makes the errors of c's argument and flag checks usage errors.
func asUsage(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	if pre := c.PreRunE; pre != nil {
		c.PreRunE = func(cmd *cobra.Command, a []string) error {
			if err := pre(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "sless", buildVersion())
			return err
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return "dev-" + s.Value
		}
	}
	return "dev"
}
