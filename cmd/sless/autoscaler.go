package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kedascaler"
	"sless.dev/sless/autoscaler/queuedepth"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/autoscaler/scheduler/kubeledger"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/adminauth/kubetoken"
	"sless.dev/sless/internal/amqpurl"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/kubewatch"
)

// autoscalerOptions are the flags of `sless autoscaler`.
type autoscalerOptions struct {
	listen, grpc, admin string
	leaderElect         bool
	leaderNamespace     string
	rabbitmqURL         string
	activatorAdmin      string // where cron fires are sent
	adminSecret         string // the Secret of the admin token they carry
	cronLedger          string // the ConfigMap of the fires sent
	databaseURL         string // the runs' store, whose demand is a signal
}

// leaderElectionID names the Lease the autoscaler replicas compete for.
const leaderElectionID = "sless-autoscaler"

// rabbitmqURLEnv supplies --rabbitmq-url, so the password stays out of the
// pod spec's arguments.
const rabbitmqURLEnv = "SLESS_RABBITMQ_URL"

// rabbitmqURL is the --rabbitmq-url given, else rabbitmqURLEnv's.
func rabbitmqURL(cmd *cobra.Command, given string) string {
	if cmd.Flags().Changed("rabbitmq-url") {
		return given
	}
	return os.Getenv(rabbitmqURLEnv)
}

func newAutoscalerCommand() *cobra.Command {
	var o autoscalerOptions
	cmd := &cobra.Command{
		Use:   "autoscaler",
		Short: "Decide and apply replicas for every Function",
		Long: `autoscaler decides how many instances every Function needs and makes it so:
through the Deployment's scale subresource for functions sless owns, through
KEDA's external scaler (served on --grpc) for those KEDA owns. It learns the
Functions and their ready instances by watching the API server (the cluster's
in-cluster config, or KUBECONFIG), and the requests waiting in activators from
their pushes on --listen. Health and metrics are on --admin.

Replicas run with leader election (the Lease "sless-autoscaler"): only the
leader watches, decides and writes, and only the leader is ready, so the
Service sends activators and KEDA to it; the others answer 503 (HTTP) or
Unavailable (gRPC) until they lead. ` + rabbitmqURLEnv + ` supplies
--rabbitmq-url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAutoscaler(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", ":8090", "address of the port activators push pokes and buffered counts to")
	f.StringVar(&o.grpc, "grpc", ":9095", "address of KEDA's external scaler (gRPC)")
	f.StringVar(&o.admin, "admin", ":9090", "address of the health and metrics port")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "run as one of several replicas, the leader deciding")
	f.StringVar(&o.leaderNamespace, "leader-election-namespace", "", leaderNamespaceUsage)
	f.StringVar(&o.activatorAdmin, "activator-admin", "http://sless-activator.sless-system.svc:9090",
		"the activators' admin API, which cron fires are sent through")
	f.StringVar(&o.adminSecret, "admin-secret", kubetoken.DefaultName,
		"the Secret, in the pod's namespace (POD_NAMESPACE, else "+kubetoken.DefaultNamespace+"), whose key "+kubetoken.Key+
			" is the admin API's token, sent with cron fires and followed when rotated ($SLESS_ADMIN_TOKEN instead, when set)")
	f.StringVar(&o.cronLedger, "cron-ledger", "sless-cron", "the ConfigMap, in the leader election namespace, of the cron fires sent")
	f.StringVar(&o.databaseURL, "database-url", os.Getenv("SLESS_DATABASE_URL"),
		"PostgreSQL URL of the runs the activators keep, whose due and running runs are a signal (default $SLESS_DATABASE_URL; none when empty)")
	f.StringVar(&o.rabbitmqURL, "rabbitmq-url", "", "AMQP URL of the broker of every queue, whatever its trigger's Secret ["+rabbitmqURLEnv+"] (each trigger's Secret when empty)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		o.rabbitmqURL = rabbitmqURL(cmd, o.rabbitmqURL)
		return o.check()
	}
	return cmd
}

// check refuses malformed or clashing addresses before anything starts.
func (o autoscalerOptions) check() error {
	seen := map[string]string{}
	for _, a := range [][2]string{{"--listen", o.listen}, {"--grpc", o.grpc}, {"--admin", o.admin}} {
		_, port, err := net.SplitHostPort(a[1])
		if err != nil {
			return fmt.Errorf("%s %q: want host:port: %w", a[0], a[1], err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: port must be a number from 0 to 65535", a[0], a[1])
		}
		if other, clash := seen[a[1]]; clash && port != "0" {
			return fmt.Errorf("%s and %s are both %q: each needs its own port", other, a[0], a[1])
		}
		seen[a[1]] = a[0]
	}
	if u, err := url.Parse(o.activatorAdmin); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--activator-admin %q: want http://host:port", o.activatorAdmin)
	}
	return checkAMQPURL("--rabbitmq-url", o.rabbitmqURL)
}

// checkAMQPURL refuses a broker URL that is not AMQP, without quoting it:
// it may hold a password.
func checkAMQPURL(flag, u string) error {
	if u == "" {
		return nil
	}
	if err := amqpurl.Check(u); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

func runAutoscaler(ctx context.Context, o autoscalerOptions) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	restCfg, err := ctrlconfig.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	listeners, err := listenAll(o)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	// The Go and process series are in controller-runtime's registry,
	// served beside ours: its controller package registers them when it is
	// linked in (the controller subcommand does), and otherwise this does.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		_ = ctrlmetrics.Registry.Register(c) // an error means they are there
	}
	kube, err := client.New(restCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	keda := kedascaler.New(log)
	deployments := &kubewatch.KubernetesScaler{Client: kube}
	router := kubewatch.NewReplicaRouter(deployments, keda)
	queues := queuedepth.NewBrokers(brokerURLs(kube, o.rabbitmqURL), log)
	defer queues.Close()
	waker := queuedepth.NewWaker(queues, log)
	defer waker.Close()
	scaling := []autoscaler.Option{autoscaler.WithQueueReader(queues), autoscaler.WithWaker(waker)}
	runStore, closeRuns, err := (&databaseFlags{url: o.databaseURL}).openRuns(ctx, log)
	if err != nil {
		return err
	}
	defer closeRuns()
	if runStore != nil {
		scaling = append(scaling, autoscaler.WithRuns(runStore, log))
	}
	a, err := autoscaler.New(autoscaler.NewScraper(time.Second), router, reg, log, scaling...)
	if err != nil {
		return err
	}
	feed, err := kubewatch.NewAutoscalerFeed(restCfg, a, router, log)
	if err != nil {
		return err
	}
	guard, err := adminGuard(ctx, restCfg, o.adminSecret, false, log)
	if err != nil {
		return err
	}
	cron, err := newCronScheduler(o, kube, a, guard, reg, log)
	if err != nil {
		return err
	}
	feed.Crons = cron
	deployments.Reader = feed.Deployments()
	mgr, err := manager.New(restCfg, manager.Options{
		Logger:                        logr.FromSlogHandler(log.Handler()),
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       leaderElectionNamespace(o.leaderNamespace),
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // served on --admin
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	var leading atomic.Bool
	runnables := []manager.Runnable{
		manager.RunnableFunc(func(ctx context.Context) error { return lead(ctx, feed, a, cron, &leading, log) }),
		httpServer("push", listeners[0], leaderOnly(&leading, a.Handler())),
		&grpcServer{lis: listeners[1], keda: keda, leading: &leading},
		httpServer("admin", listeners[2], adminHandler(&leading, reg)),
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return err
		}
	}
	log.Info("autoscaler starting", "push", o.listen, "grpc", o.grpc, "admin", o.admin, "leaderElection", o.leaderElect)
	return mgr.Start(ctx)
}

// listenAll binds --listen, --grpc and --admin, in that order, so that a
// port in use fails at start and names its flag.
func listenAll(o autoscalerOptions) ([]net.Listener, error) {
	var lns []net.Listener
	for _, a := range [][2]string{{"--listen", o.listen}, {"--grpc", o.grpc}, {"--admin", o.admin}} {
		ln, err := net.Listen("tcp", a[1])
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("%s: %w", a[0], err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// lead is the leader's work: watch the Functions and their instances, then
// decide and write every second until ctx ends (leadership ends with the
// process). The watch starts here, not before, so that a replica that has
// waited long for the lease starts every decider afresh rather than
// judging the load of the time it did not observe as idle.
func lead(ctx context.Context, feed *kubewatch.AutoscalerFeed, a *autoscaler.Autoscaler, cron *scheduler.Scheduler, leading *atomic.Bool, log *slog.Logger) error {
	if err := feed.Run(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	leading.Store(true)
	defer leading.Store(false)
	log.Info("leading: deciding and writing replicas, firing cron triggers")
	go cron.Run(ctx)
	a.Run(ctx)
	return nil
}

// brokerURLs resolves a queue's broker, the namespace/name of its
// trigger's connectionSecret, to the URL in the Secret's key url; every
// broker is override when that is set.
func brokerURLs(kube client.Client, override string) func(context.Context, string) (string, error) {
	return func(ctx context.Context, broker string) (string, error) {
		if override != "" {
			return override, nil
		}
		namespace, name, ok := strings.Cut(broker, "/")
		if !ok {
			return "", errors.New("the trigger has no connectionSecret")
		}
		return controller.BrokerURL(ctx, kube, namespace, name)
	}
}

// newCronScheduler is the leader's scheduler: it fires through the
// activators, and claims each fire in a ConfigMap so that a fire happens
// once across leader changes.
func newCronScheduler(o autoscalerOptions, kube client.Client, a *autoscaler.Autoscaler, admin *adminauth.Guard, reg prometheus.Registerer, log *slog.Logger) (*scheduler.Scheduler, error) {
	m, err := scheduler.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	firer := scheduler.HTTPFirer{URL: o.activatorAdmin, Token: func() string { return admin.Load().Token }, Client: &http.Client{}}
	ledger := &kubeledger.Ledger{Client: kube, Namespace: leaderElectionNamespace(o.leaderNamespace), Name: o.cronLedger}
	return scheduler.New(firer, a, ledger, m, log), nil
}

// errNotLeader is what a replica that does not lead answers on gRPC.
var errNotLeader = status.Error(codes.Unavailable,
	"this autoscaler replica is not the leader: reach the leader through the autoscaler Service")

// leaderOnly refuses pushes while this replica does not lead: it has no
// state to apply them to, and the leader would never see them. The
// connection is closed, so the activator's next one goes through the
// Service to the ready replica, the leader.
func leaderOnly(leading *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !leading.Load() {
			w.Header().Set("Connection", "close")
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{
				"error": "this autoscaler replica is not the leader: push through the autoscaler Service"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// adminHandler serves /healthz (the process is up), /readyz (this replica
// leads: the Service sends traffic to the leader only) and /metrics (the
// autoscaler's, with controller-runtime's leader election and client
// metrics).
func adminHandler(leading *atomic.Bool, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !leading.Load() {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "standby: not the leader"})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "leading"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{}))
	return mux
}

// httpServer serves h on ln on every replica, stopping with the manager.
func httpServer(name string, ln net.Listener, h http.Handler) *manager.Server {
	return &manager.Server{Name: name, Listener: ln, ShutdownTimeout: ptr.To(5 * time.Second),
		Server: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
}

// grpcServer serves KEDA's external scaler on every replica; calls are
// refused with Unavailable while the replica does not lead.
type grpcServer struct {
	lis     net.Listener
	keda    *kedascaler.Server
	leading *atomic.Bool
}

// Start serves until ctx ends, then ends the activation streams and stops
// gracefully.
func (g *grpcServer) Start(ctx context.Context) error {
	gs := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !g.leading.Load() {
				return nil, errNotLeader
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if !g.leading.Load() {
				return errNotLeader
			}
			return h(srv, ss)
		}),
	)
	externalscaler.RegisterExternalScalerServer(gs, g.keda)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(g.lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("--grpc: %w", err)
	case <-ctx.Done():
	}
	g.keda.Close()
	gs.GracefulStop()
	return nil
}

// NeedLeaderElection is false: every replica serves, so that KEDA gets a
// clear Unavailable from one that does not lead.
func (*grpcServer) NeedLeaderElection() bool { return false }
