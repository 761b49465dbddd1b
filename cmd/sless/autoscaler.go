package main

import (
	"cmp"
	"context"
	"crypto/rand"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/kedascaler"
	"sless.dev/sless/autoscaler/queuedepth"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/autoscaler/scheduler/kubeledger"
	"sless.dev/sless/autoscaler/shard"
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
	buckets             int    // 0: this replica scales every function, alone
	leaseNamespace      string // of the shards' Leases and the cron ledger
	advertise           string // the host peers reach this replica on
	rabbitmqURL         string
	activatorAdmin      string // where cron fires are sent
	adminSecret         string // the Secret of the admin token they carry
	cronLedger          string // the ConfigMap of the fires sent
	databaseURL         string // the runs' store, whose demand is a signal
}

// envPodIP is the pod's address (the downward API), which peers reach a
// replica on.
const envPodIP = "POD_IP"

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

Replicas share the functions: each function hashes into one of --buckets
buckets, the live replicas deal the buckets out among themselves through
Leases named sless-autoscaler-*, and each decides for the functions of its
buckets only. Every replica takes every push and KEDA call, passing on to
its peer those for functions the peer scales; when a replica stops, the
others take its buckets at once, and when one dies, once its Lease lapsed
(10 s). ` + rabbitmqURLEnv + ` supplies --rabbitmq-url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAutoscaler(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", ":8090", "address of the port activators push pokes and buffered counts to")
	f.StringVar(&o.grpc, "grpc", ":9095", "address of KEDA's external scaler (gRPC)")
	f.StringVar(&o.admin, "admin", ":9090", "address of the health and metrics port")
	f.IntVar(&o.buckets, "buckets", shard.DefaultBuckets, "buckets the functions hash into, shared among the replicas; the same for every replica (0: scale every function alone, without Leases)")
	f.StringVar(&o.leaseNamespace, "lease-namespace", "", "namespace of the replicas' Leases and the cron ledger (default: the pod's; outside a cluster the kubeconfig context's, or "+
		defaultLeaderNamespace+")")
	f.StringVar(&o.advertise, "advertise-host", os.Getenv(envPodIP), "the host the other replicas reach this one on (default $"+envPodIP+", else 127.0.0.1)")
	f.StringVar(&o.activatorAdmin, "activator-admin", "http://sless-activator.sless-system.svc:9090",
		"the activators' admin API, which cron fires are sent through")
	f.StringVar(&o.adminSecret, "admin-secret", kubetoken.DefaultName,
		"the Secret, in the pod's namespace (POD_NAMESPACE, else "+kubetoken.DefaultNamespace+"), whose key "+kubetoken.Key+
			" is the admin API's token, sent with cron fires and followed when rotated ($SLESS_ADMIN_TOKEN instead, when set)")
	f.StringVar(&o.cronLedger, "cron-ledger", "sless-cron", "the ConfigMap, in --lease-namespace, of the cron fires sent")
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
	if o.buckets < 0 {
		return fmt.Errorf("--buckets %d: want 0 or more", o.buckets)
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
	restCfg, err := kubeConfig()
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
	shards, err := newShards(restCfg, o, listeners, reg, log)
	if err != nil {
		return err
	}
	keda := kedascaler.New(log)
	deployments := &kubewatch.KubernetesScaler{Client: kube}
	router := kubewatch.NewReplicaRouter(deployments, keda)
	queues := queuedepth.NewBrokers(brokerURLs(kube, o.rabbitmqURL), log)
	defer queues.Close()
	waker := queuedepth.NewWaker(queues, log)
	defer waker.Close()
	scaling := []autoscaler.Option{autoscaler.WithQueueReader(queues), autoscaler.WithWaker(waker)}
	if shards != nil {
		scaling = append(scaling, autoscaler.WithPeers(shards))
	}
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
	var scaler externalscaler.ExternalScalerServer = keda
	if shards != nil {
		forwarder := share(ctx, shards, feed, router, keda, log)
		defer forwarder.Close()
		scaler = forwarder
	}
	mgr, err := manager.New(restCfg, manager.Options{
		Logger:  logr.FromSlogHandler(log.Handler()),
		Metrics: metricsserver.Options{BindAddress: "0"}, // served on --admin
	})
	if err != nil {
		return fmt.Errorf("autoscaler manager: %w", err)
	}
	var ready atomic.Bool
	runnables := []manager.Runnable{
		manager.RunnableFunc(func(ctx context.Context) error { return scale(ctx, feed, shards, a, cron, &ready, log) }),
		httpServer("push", listeners[0], a.Handler()),
		&grpcServer{lis: listeners[1], scaler: scaler, keda: keda},
		httpServer("admin", listeners[2], adminHandler(&ready, reg)),
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return err
		}
	}
	log.Info("autoscaler starting", "push", o.listen, "grpc", o.grpc, "admin", o.admin, "buckets", o.buckets)
	return mgr.Start(ctx)
}

// share makes this replica scale its share of the functions only: the
// feed pushes and the router writes those alone, a change of share is
// followed at once (the functions taken start afresh, KEDA's streams of
// those lost end) and KEDA's calls for a peer's functions are passed on
// by the Forwarder returned.
func share(ctx context.Context, shards *shard.Coordinator, feed *kubewatch.AutoscalerFeed, router *kubewatch.ReplicaRouter,
	keda *kedascaler.Server, log *slog.Logger) *kedascaler.Forwarder {
	feed.Owns, router.Owns = shards.Owns, shards.Owns
	shards.OnChange = func() {
		// Also as the replica leaves, its context ended.
		if err := feed.Resync(context.WithoutCancel(ctx)); err != nil {
			log.Error("autoscaler shard: take the functions of the buckets held", "err", err)
		}
		keda.EndStreams(shards.Owns)
	}
	return &kedascaler.Forwarder{Local: keda, Owners: shards}
}

// newShards is the coordinator this replica shares the functions with
// its peers by, nil with --buckets 0. Peers reach it on the ports bound,
// at --advertise-host.
func newShards(cfg *rest.Config, o autoscalerOptions, listeners []net.Listener, reg prometheus.Registerer, log *slog.Logger) (*shard.Coordinator, error) {
	if o.buckets == 0 {
		return nil, nil
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	host := cmp.Or(o.advertise, "127.0.0.1")
	addr := func(ln net.Listener) string {
		return net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	self := shard.Member{Name: replicaName(), Push: addr(listeners[0]), GRPC: addr(listeners[1])}
	c, err := shard.New(clientset, shard.Config{Namespace: leaderElectionNamespace(o.leaseNamespace), Prefix: shard.DefaultPrefix,
		Buckets: o.buckets, Self: self}, log)
	if err != nil {
		return nil, err
	}
	return c, reg.Register(shard.HeldGauge(c.Held))
}

// replicaName names this replica among its peers: its pod, else its host
// and a random suffix, so that two processes on one machine differ.
func replicaName() string {
	if pod := os.Getenv(envPodName); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	return strings.ToLower(cmp.Or(host, "autoscaler") + "-" + rand.Text()[:8])
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

// scale is the replica's work: watch the Functions and their instances,
// take a share of them (all, alone), then decide and write every second
// and fire the cron triggers of its share until ctx ends. The share is
// taken after the watch synced, so that the functions of every bucket
// taken are there to start afresh.
func scale(ctx context.Context, feed *kubewatch.AutoscalerFeed, shards *shard.Coordinator, a *autoscaler.Autoscaler, cron *scheduler.Scheduler, ready *atomic.Bool, log *slog.Logger) error {
	if err := feed.Run(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	sharing := make(chan error, 1)
	if shards != nil {
		go func() { sharing <- shards.Run(ctx) }()
	}
	ready.Store(true)
	defer ready.Store(false)
	log.Info("scaling: deciding and writing replicas, firing cron triggers")
	go cron.Run(ctx)
	go a.Run(ctx)
	select {
	case err := <-sharing:
		return err
	case <-ctx.Done():
		if shards != nil {
			<-sharing // its buckets released
		}
		return nil
	}
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

// newCronScheduler is the replica's scheduler of the cron triggers of its
// share: it fires through the activators, and claims each fire in a
// ConfigMap so that a fire happens once as functions change hands.
func newCronScheduler(o autoscalerOptions, kube client.Client, a *autoscaler.Autoscaler, admin *adminauth.Guard, reg prometheus.Registerer, log *slog.Logger) (*scheduler.Scheduler, error) {
	m, err := scheduler.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	firer := scheduler.HTTPFirer{URL: o.activatorAdmin, Token: func() string { return admin.Load().Token }, Client: &http.Client{}}
	ledger := &kubeledger.Ledger{Client: kube, Namespace: leaderElectionNamespace(o.leaseNamespace), Name: o.cronLedger}
	return scheduler.New(firer, a, ledger, m, log), nil
}

// adminHandler serves /healthz (the process is up), /readyz (its watch
// synced: it may be sent pushes) and /metrics (the autoscaler's, with
// controller-runtime's client metrics).
func adminHandler(ready *atomic.Bool, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "starting: the watch has not synced"})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{}))
	return mux
}

// httpServer serves h on ln on every replica, stopping with the manager.
func httpServer(name string, ln net.Listener, h http.Handler) *manager.Server {
	return &manager.Server{Name: name, Listener: ln, ShutdownTimeout: ptr.To(5 * time.Second),
		Server: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
}

// grpcServer serves KEDA's external scaler.
type grpcServer struct {
	lis    net.Listener
	scaler externalscaler.ExternalScalerServer
	keda   *kedascaler.Server
}

// Start serves until ctx ends, then ends the activation streams and stops
// gracefully.
func (g *grpcServer) Start(ctx context.Context) error {
	gs := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(gs, g.scaler)
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
