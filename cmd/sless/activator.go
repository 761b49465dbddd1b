package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/activator"
	"sless.dev/sless/adminapi/kubeadmin"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/console"
	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/adminauth/kubetoken"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/kubewatch"
	"sless.dev/sless/timeline"
)

func newActivatorCommand() *cobra.Command {
	var (
		listen, admin, domain, autoscaler string
		trustedProxies                    []string
		peersService, adminSecret         string
		brokerURL                         string
		cfg                               activator.Config
		drain, readTimeout, propagation   time.Duration
		records                           int
		db                                databaseFlags
	)
	cmd := &cobra.Command{
		Use:   "activator",
		Short: "Serve invocations on Kubernetes: route, throttle, buffer at zero, balance",
		Long: `activator is the front door of every function on Kubernetes. It learns the
Functions and their ready instances by watching the API server (the cluster's
in-cluster config, or KUBECONFIG), serves invocations on --listen and its
health, metrics and admin API on --admin.

The admin API requires a bearer token: the key "token" of the Secret
--admin-secret in POD_NAMESPACE (sless-system when unset), which the
activator creates with a random token when it is missing and follows as it
is rotated; when it can neither read nor create it, the admin API answers
503 saying so, and is never open. SLESS_ADMIN_TOKEN, when set, is the token
instead, fixed for the process's life.

Invocation records go to PostgreSQL with --database-url (or
SLESS_DATABASE_URL), to memory without.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, serving, end := servingLife(cmd.Context())
			defer end()
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			restCfg, err := kubeConfig()
			if err != nil {
				return fmt.Errorf("kubernetes configuration: %w", err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			store, err := db.open(ctx, invocation.NewRing(records), reg, log)
			if err != nil {
				return err
			}
			defer store.close()
			var poker activator.Poker = logPoker{log}
			var client *activator.AutoscalerClient
			if autoscaler != "" {
				id, _ := os.Hostname() // the pod's name
				client = &activator.AutoscalerClient{BaseURL: autoscaler, ID: id, Log: log}
				go client.Run(ctx)
				poker = client
			}
			tl := timeline.New()
			a, err := activator.New(cfg, poker, timeline.Tee(store, tl), reg, log)
			if err != nil {
				return err
			}
			if client != nil {
				go client.ReportBuffered(ctx, a, time.Second)
			}
			runStore, closeRuns, err := db.openRuns(ctx, log)
			if err != nil {
				return err
			}
			dispatched := make(chan struct{})
			if runStore != nil {
				a.EnableRuns(runStore, activator.RunsConfig{BrokerURL: brokerURL})
				// No run is claimed once the activator begins to stop;
				// those under way have the drain to end, and the store
				// stays open for their outcomes.
				go func() { a.Dispatch(cmd.Context()); close(dispatched) }()
			} else {
				close(dispatched)
			}
			defer func() {
				select {
				case <-dispatched:
				case <-time.After(drain):
				}
				end()
				closeRuns()
			}()
			feed, err := kubewatch.NewActivatorFeed(restCfg, a, log)
			if err != nil {
				return err
			}
			if err := feed.Run(ctx); err != nil {
				return err
			}
			peers, err := watchPeers(ctx, restCfg, peersService, a, log)
			if err != nil {
				return err
			}
			servingLn, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			adminLn, err := net.Listen("tcp", admin)
			if err != nil {
				return fmt.Errorf("--admin: %w", err)
			}
			api, err := adminBackend(restCfg, feed, tl, servingLn)
			if err != nil {
				return err
			}
			api.Waiting, api.Log = a.Waiting, log
			if client != nil {
				api.Scaling = client.Scaling
			}
			go api.Sample(ctx, time.Second)
			guard, err := adminGuard(ctx, restCfg, adminSecret, true, log)
			if err != nil {
				return err
			}
			whole := &kubeadmin.Whole{Local: tl, Token: func() string { return guard.Load().Token },
				Client: &http.Client{}, Log: log}
			if peers != nil {
				whole.Peers = peers.Others
			}
			api.View = whole.View
			srv := &activator.Server{Activator: a, DrainTimeout: drain, PropagationDelay: propagation, ReadTimeout: readTimeout, Log: log,
				Admin: activator.AdminServer{Activator: a, Registry: reg, Records: store, Guard: guard, API: kubeadmin.Handler(api, whole, runStore),
					ConsoleFor:    func(token string) http.Handler { return console.Handler{Token: token} },
					AcceptRecords: true, Log: log}}
			serving()
			return srv.Run(cmd.Context(), servingLn, adminLn)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":8080", "address of the invocation port")
	f.StringVar(&admin, "admin", ":9090", "address of the health, metrics and admin port")
	f.StringVar(&domain, "domain", "", "serve <name>.<namespace>.<domain> too (host routing off when empty)")
	f.StringSliceVar(&trustedProxies, "trusted-proxies", nil,
		"networks (CIDR) or addresses of the proxies in front, such as an ingress that ends TLS: their X-Forwarded-Proto and X-Forwarded-Host reach functions; anyone else's are removed")
	f.StringVar(&autoscaler, "autoscaler-url", "", "the autoscaler's base URL, for pokes and buffered counts (logged when empty)")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", activator.DefaultMaxBodyBytes, "largest request body (413 beyond)")
	f.IntVar(&cfg.QueueDepth, "queue-depth", activator.DefaultQueueDepth, "requests that may wait per function")
	f.IntVar(&cfg.MaxBuffered, "max-buffered", activator.DefaultMaxBuffered, "requests that may wait across all functions")
	f.DurationVar(&drain, "drain", activator.DefaultDrainTimeout, "longest drain at shutdown")
	f.DurationVar(&propagation, "propagation-delay", activator.DefaultPropagationDelay,
		"how long to keep taking connections after turning unready on SIGTERM, before draining: the endpoints' update time")
	f.DurationVar(&readTimeout, "read-timeout", forward.DefaultReadTimeout,
		"most a client may take to send a request head, or each part of its body (408 beyond)")
	f.IntVar(&records, "records", 10_000, "invocation records kept in memory, without --database-url")
	db.register(f)
	f.StringVar(&adminSecret, "admin-secret", kubetoken.DefaultName,
		"the Secret, in the pod's namespace (POD_NAMESPACE, else "+kubetoken.DefaultNamespace+"), whose key "+kubetoken.Key+
			" is the admin API's token: created with a random one when missing, followed when rotated (unused with SLESS_ADMIN_TOKEN)")
	f.StringVar(&peersService, "peers-service", "sless-activator",
		"the activators' Service, in the pod's namespace (POD_NAMESPACE): its ready endpoints share every instance's concurrency; POD_IP names this one")
	f.StringVar(&brokerURL, "rabbitmq-url", "",
		"AMQP URL of the broker that the answers of runs are published to, for functions whose async.onSuccess or onFailure name a queue ["+rabbitmqURLEnv+"] (they wait, kept with their runs, when empty)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		brokerURL = rabbitmqURL(cmd, brokerURL)
		if err := checkAMQPURL("--rabbitmq-url", brokerURL); err != nil {
			return err
		}
		cfg.Domain = domain
		proxies, err := parsePrefixes(trustedProxies)
		if err != nil {
			return fmt.Errorf("--trusted-proxies: %w", err)
		}
		cfg.TrustedProxies = proxies
		if cfg.MaxBodyBytes < 1 || cfg.QueueDepth < 1 || cfg.MaxBuffered < 1 || records < 1 || readTimeout <= 0 || propagation < 0 {
			return fmt.Errorf("--max-body-bytes, --queue-depth, --max-buffered, --records and --read-timeout must be positive, --propagation-delay not negative")
		}
		if adminSecret == "" {
			return fmt.Errorf("--admin-secret must name the Secret of the admin token (or set SLESS_ADMIN_TOKEN)")
		}
		return nil
	}
	return cmd
}

// adminBackend serves the admin API and the console from the Functions
// the activator watches; its actions patch them.
func adminBackend(cfg *rest.Config, feed *kubewatch.ActivatorFeed, tl *timeline.Timeline, serving net.Listener) (*kubeadmin.Backend, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme}) // uncached: the actions read their own writes
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	port := serving.Addr().(*net.TCPAddr).Port
	return &kubeadmin.Backend{Reader: feed.Reader(), Client: live, Timeline: tl,
		Invoke: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// servingLife returns the context of what the activator serves with (its
// watches, the autoscaler's client, the records, the admin token): a signal
// before serving ends it, but once serving is called only end does, after
// the server's propagation delay and drain. An activator told to stop keeps
// serving for those; with its watches stopped at the signal it answered
// "unknown function" for a Function created meanwhile, and sent requests to
// instances already gone.
func servingLife(signal context.Context) (ctx context.Context, serving, end func()) {
	ctx, end = context.WithCancel(context.WithoutCancel(signal))
	stop := context.AfterFunc(signal, end)
	return ctx, func() { stop() }, end
}

// adminGuard holds the admin API's token: with SLESS_ADMIN_TOKEN, that
// token; else the token of the Secret name in the pod's namespace,
// followed as it changes, so that a rotation needs no restart. generate
// creates the Secret with a random token when it is missing (the
// activators, which guard the API: an install is never open); the
// autoscaler only reads it, to send with cron fires. It returns once the
// guard holds that token, or refuses and says why.
func adminGuard(ctx context.Context, cfg *rest.Config, name string, generate bool, log *slog.Logger) (*adminauth.Guard, error) {
	guard := &adminauth.Guard{}
	if token := os.Getenv("SLESS_ADMIN_TOKEN"); token != "" {
		guard.Set(token)
		log.Info("admin API guarded by SLESS_ADMIN_TOKEN")
		return guard, nil
	}
	namespace := cmp.Or(os.Getenv("POD_NAMESPACE"), kubetoken.DefaultNamespace)
	secret, err := kubetoken.New(cfg, namespace, name, guard, log)
	if err != nil {
		return nil, err
	}
	secret.Generate = generate
	if err := secret.Run(ctx); err != nil {
		return nil, err
	}
	return guard, nil
}

// watchPeers makes the activator share every instance's concurrency with
// the other ready endpoints of service, in the pod's namespace, when the
// pod's IP is known (POD_IP, from the downward API), and returns the
// watch, which also names them for the admin API's whole view; without
// it, the activator admits all of it and answers with its own view.
func watchPeers(ctx context.Context, cfg *rest.Config, service string, a *activator.Activator, log *slog.Logger) (*kubewatch.Peers, error) {
	ip, namespace := os.Getenv("POD_IP"), os.Getenv("POD_NAMESPACE")
	if service == "" || ip == "" || namespace == "" {
		log.Warn("not sharing instances' concurrency with other activators, nor merging their views: --peers-service, POD_IP or POD_NAMESPACE unset",
			"peersService", service, "podIP", ip, "podNamespace", namespace)
		return nil, nil
	}
	peers, err := kubewatch.NewPeers(cfg, namespace, service, ip, a, log)
	if err != nil {
		return nil, err
	}
	return peers, peers.Run(ctx)
}

// logPoker logs the pokes it cannot deliver, until an autoscaler is
// configured.
type logPoker struct{ log *slog.Logger }

func (p logPoker) Poke(namespace, name string) {
	p.log.Info("function needs an instance", "namespace", namespace, "function", name)
}

// parsePrefixes reads networks in CIDR notation, or single addresses.
func parsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a network (10.0.0.0/8) nor an address", v)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
