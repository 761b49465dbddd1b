package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"sless.dev/sless/activator"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/local"
)

func newDevCommand() *cobra.Command {
	var (
		opts       local.Options
		db         databaseFlags
		prom       bool
		promListen string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the platform locally on a directory of Function manifests",
		Long: `dev runs the whole platform on this machine: the activator on --listen, the
admin API and metrics on --admin, the autoscaler, and each function instance as
a local process behind its own queue-proxy. It loads every Function manifest
(*.yaml, *.yml) directly in --functions, builds or installs each source, and
applies changes to manifests and sources while it runs. Ctrl-C drains requests
in flight and stops every instance within --drain; a second Ctrl-C stops at
once. Both ports bind 127.0.0.1 unless --listen and --admin say otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			opts.Out = out
			opts.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			opts.InstanceLog = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			opts.AdminToken = os.Getenv("SLESS_ADMIN_TOKEN")
			if opts.CacheDir == "" {
				dir, err := os.UserCacheDir()
				if err != nil {
					return fmt.Errorf("--cache-dir: %w", err)
				}
				opts.CacheDir = filepath.Join(dir, "sless")
			}
			reg := prometheus.NewRegistry()
			store, err := db.open(cmd.Context(), invocation.NewRing(10_000), reg, opts.Log)
			if err != nil {
				return err
			}
			defer store.close()
			opts.Records, opts.Registry = store, reg
			runStore, closeRuns, err := db.openRuns(cmd.Context(), opts.Log)
			if err != nil {
				return err
			}
			defer closeRuns()
			opts.Runs = runStore
			p, err := local.New(opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "sless dev: functions from %s, invocations on %s, admin on %s\n", opts.Dir, p.Addr(), p.AdminAddr())
			if runStore == nil {
				fmt.Fprintln(out, "runs (Prefer: respond-async) are kept in memory and end with this process: --database-url keeps them in PostgreSQL")
			}
			if !prom {
				return p.Run(cmd.Context())
			}
			pr, err := startPrometheus(promListen, p.AdminAddr(), opts.CacheDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "prometheus on %s (rules and alerts of config/prometheus; its log: %s)\n", pr.url, pr.log)
			go pr.watch(cmd.Context(), cmd.ErrOrStderr())
			return errors.Join(p.Run(cmd.Context()), pr.stop())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "functions", "config/samples/functions", "directory of Function manifests")
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:8080", "address of the invocation port (:8080 for every interface)")
	f.StringVar(&opts.Admin, "admin", "127.0.0.1:9090", "address of the admin API, health and metrics (:9090 for every interface)")
	f.StringVar(&opts.CacheDir, "cache-dir", "", "builds and installed dependencies (default: the user cache directory/sless)")
	db.register(f)
	f.StringVar(&opts.AMQPURL, "amqp-url", defaultAMQPURL(),
		"RabbitMQ broker of every rabbitmq trigger (default $SLESS_AMQP_URL, else the local broker; empty: none consumed)")
	f.BoolVar(&prom, "prometheus", false, "also run Prometheus (the prometheus binary on PATH) on the platform, with sless's rules and alerts")
	f.StringVar(&promListen, "prometheus-listen", "127.0.0.1:9092", "address of Prometheus's web UI and API, with --prometheus")
	f.BoolVar(&opts.AllowExternalSources, "allow-external-sources", false,
		"serve manifests whose spec.source is outside the --functions directory")
	f.DurationVar(&opts.Drain, "drain", 30*time.Second, "longest drain of requests and instances at exit")
	f.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", activator.DefaultMaxBodyBytes, "largest request body (413 beyond)")
	f.DurationVar(&opts.ReadTimeout, "read-timeout", forward.DefaultReadTimeout,
		"most a client may take to send a request head, or each part of its body (408 beyond)")
	f.DurationVar(&opts.ReadinessGrace, "readiness-grace", v1alpha1.ReadinessGrace,
		"how long an instance may run without passing its readiness check before its function shows why and requests get 503")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if opts.MaxBodyBytes < 1 || opts.MaxBodyBytes > math.MaxInt32 || opts.ReadTimeout < time.Millisecond {
			return fmt.Errorf("--max-body-bytes must be from 1 to %d and --read-timeout at least 1ms", math.MaxInt32)
		}
		if err := checkAMQPURL("--amqp-url", opts.AMQPURL); err != nil {
			return err
		}
		if opts.Drain <= 0 {
			return fmt.Errorf("--drain must be positive")
		}
		if opts.ReadinessGrace <= 0 {
			return fmt.Errorf("--readiness-grace must be positive")
		}
		if prom {
			if _, err := findPrometheus(); err != nil {
				return err
			}
		}
		if info, err := os.Stat(opts.Dir); err != nil || !info.IsDir() {
			return fmt.Errorf("--functions %s: not a directory of Function manifests", opts.Dir)
		}
		return nil
	}
	return cmd
}

// defaultAMQPURL is the broker of commands that take --amqp-url:
// $SLESS_AMQP_URL, else the local RabbitMQ.
func defaultAMQPURL() string {
	return cmp.Or(os.Getenv("SLESS_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}
