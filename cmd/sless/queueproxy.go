package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"sless.dev/sless/queueproxy"
)

func newQueueProxyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue-proxy",
		Short: "Run the per-instance sidecar in front of a function process",
		Long: `queue-proxy runs beside one function instance: it enforces the function's
concurrency limit and timeout, probes the user process for readiness, keeps the
stats the autoscaler reads, serves Prometheus metrics and drains on SIGTERM.

Each flag has an environment variable of the same meaning (shown in brackets);
a flag given on the command line wins.`,
		Args: cobra.NoArgs,
	}
	flags := make(map[string]*string, len(queueproxy.Settings))
	for _, s := range queueproxy.Settings {
		flags[s.Env] = cmd.Flags().String(s.Flag, "", s.Usage+" ["+s.Env+"]")
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := queueproxy.ParseConfig(func(env string) (string, bool) {
			for _, s := range queueproxy.Settings {
				if s.Env == env && cmd.Flags().Changed(s.Flag) {
					return *flags[env], true
				}
			}
			return os.LookupEnv(env)
		})
		if err != nil {
			return err
		}
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		srv, err := queueproxy.New(cfg, log)
		if err != nil {
			return err
		}
		serving, admin, err := queueproxy.Listen(cfg)
		if err != nil {
			return err
		}
		return srv.Run(cmd.Context(), serving, admin)
	}
	return cmd
}
