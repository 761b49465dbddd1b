package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sless.dev/sless/controller"
	"sless.dev/sless/controller/functionrun"
	"sless.dev/sless/runs/runclient"
)

// controllerOptions are the flags of `sless controller`.
type controllerOptions struct {
	reconciler      controller.Options
	admin           string
	leaderElect     bool
	leaderNamespace string
	kedaRecheck     time.Duration
}

// defaultImage is the sless image of this binary's version: the
// queue-proxy sidecars then speak the contract this controller writes.
func defaultImage() string {
	return "ghcr.io/sless-dev/sless:" + buildVersion()
}

// The controller's Pod, from the downward API (config/controller).
const (
	envPodName      = "POD_NAME"
	envPodNamespace = "POD_NAMESPACE"
)

// sidecarImage is the queue-proxy sidecars' image and where it came from:
// --image when given; in a pod, the controller's own image, read from its
// Pod, so that the registry and version the installer chose for sless
// (a kustomize images override) reach the sidecars too; outside a pod,
// this binary's version of the published image.
func sidecarImage(ctx context.Context, r client.Reader, flag, namespace, pod string) (image, from string, err error) {
	switch {
	case flag != "":
		return flag, "--image", nil
	case namespace != "" || pod != "":
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		image, err := controller.OwnImage(ctx, r, namespace, pod)
		if err != nil {
			return "", "", fmt.Errorf("the queue-proxy image (set --image, or %s and %s for the controller's own): %w", envPodNamespace, envPodName, err)
		}
		return image, "pod " + namespace + "/" + pod, nil
	default:
		return defaultImage(), "default", nil
	}
}

func newControllerCommand() *cobra.Command {
	var o controllerOptions
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Reconcile Functions into Deployments, Services and ScaledObjects",
		Long: `controller makes the cluster match every Function: a Deployment of the
function's image beside a queue-proxy sidecar (the sless image: --image, else
the controller's own, read from its Pod named by POD_NAMESPACE and POD_NAME,
else outside a pod ghcr.io/sless-dev/sless of this version), a headless
Service whose EndpointSlices the activator and the autoscaler read, and, for
functions KEDA scales (scale.owner keda, or RabbitMQ triggers), a KEDA
ScaledObject that asks the autoscaler (--autoscaler-address) and reads the
queues. It reports in each Function's status, with http://<--activator-host>/fn/
<namespace>/<name> as its URL. It reaches the API server through the cluster's
in-cluster config, or KUBECONFIG.

Replicas run with leader election (the Lease "sless-controller"): only the
leader reconciles. /healthz, /readyz and /metrics are on --admin. When KEDA is
installed or removed while it runs (checked every --keda-recheck), it stops,
exit status 0, for its Deployment to start it again set up for it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.reconciler.Image, "image", "", "the sless image, run as the queue-proxy sidecar of every function (default the controller's own; outside a pod "+defaultImage()+")")
	f.StringVar(&o.reconciler.ActivatorHost, "activator-host", controller.DefaultActivatorHost, "host[:port] of the activator, for status.url")
	f.StringVar(&o.reconciler.AutoscalerAddress, "autoscaler-address", controller.DefaultAutoscalerAddress, "host:port of the autoscaler's KEDA external scaler (gRPC)")
	f.StringVar(&o.reconciler.RecordsURL, "records-url", controller.DefaultRecordsURL, "the activators' admin API, where queue-proxies send the records of the messages they consume")
	f.IntVar(&o.reconciler.Workers, "workers", controller.DefaultWorkers, "Functions reconciled at once")
	f.StringVar(&o.admin, "admin", ":9090", "address of the health and metrics port")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "run as one of several replicas, the leader reconciling")
	f.StringVar(&o.leaderNamespace, "leader-election-namespace", "", leaderNamespaceUsage)
	f.DurationVar(&o.kedaRecheck, "keda-recheck", controller.DefaultKEDARecheck, "how often to check whether KEDA was installed or removed")
	cmd.PreRunE = func(*cobra.Command, []string) error { return o.check() }
	return cmd
}

// check refuses flag values that cannot work, before anything starts.
func (o controllerOptions) check() error {
	r := o.reconciler
	switch {
	case r.ActivatorHost == "":
		return errors.New("--activator-host: name the activator's host")
	case r.Workers < 1:
		return fmt.Errorf("--workers %d: must be at least 1", r.Workers)
	case o.kedaRecheck <= 0:
		return fmt.Errorf("--keda-recheck %v: must be positive", o.kedaRecheck)
	}
	if _, _, err := net.SplitHostPort(r.AutoscalerAddress); err != nil {
		return fmt.Errorf("--autoscaler-address %q: want host:port: %w", r.AutoscalerAddress, err)
	}
	if _, _, err := net.SplitHostPort(o.admin); err != nil {
		return fmt.Errorf("--admin %q: want host:port: %w", o.admin, err)
	}
	return nil
}

func runController(ctx context.Context, o controllerOptions) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	restCfg, err := kubeConfig()
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	keda, err := controller.KEDAInstalled(restCfg)
	if err != nil {
		return err
	}
	if !keda {
		log.Warn("KEDA is not installed: functions with RabbitMQ triggers or scale.owner keda will not be scaled until it is")
	}
	o.reconciler.KEDA = keda
	mo, err := controller.ManagerOptions(keda)
	if err != nil {
		return err
	}
	mo.Logger = logr.New(stopQuiet{logr.FromSlogHandler(log.Handler()).GetSink()})
	mo.LeaderElection = o.leaderElect
	mo.LeaderElectionID = controller.Name
	mo.LeaderElectionNamespace = leaderElectionNamespace(o.leaderNamespace)
	mo.LeaderElectionReleaseOnCancel = true
	// One port for metrics and probes, as in the other components. The
	// process being up is all there is to check: standby replicas are
	// healthy and ready too, since nothing is sent to them.
	health := healthz.CheckHandler{Checker: healthz.Ping}
	mo.Metrics = metricsserver.Options{BindAddress: o.admin, ExtraHandlers: map[string]http.Handler{
		"/healthz": health,
		"/readyz":  health,
	}}
	mgr, err := manager.New(restCfg, mo)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	namespace, pod := os.Getenv(envPodNamespace), os.Getenv(envPodName)
	image, from, err := sidecarImage(ctx, mgr.GetAPIReader(), o.reconciler.Image, namespace, pod)
	if err != nil {
		return err
	}
	if o.reconciler.Image == "" && namespace == "" && pod == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		log.Warn("in a pod without " + envPodNamespace + " and " + envPodName + ": the queue-proxy sidecars run the default image, " +
			"not necessarily the controller's; set them from the downward API, or --image")
	}
	log.Info("queue-proxy image", "image", image, "from", from)
	o.reconciler.Image = image
	if err := controller.New(mgr, o.reconciler).SetupWithManager(mgr); err != nil {
		return err
	}
	runClient := &runclient.Client{Base: "http://" + o.reconciler.ActivatorHost}
	if err := functionrun.New(mgr, functionrun.Options{Runs: runClient}).SetupWithManager(mgr); err != nil {
		return err
	}
	watch := &controller.KEDAWatch{Config: restCfg, Installed: keda, Every: o.kedaRecheck, Log: mo.Logger.WithName("keda")}
	if err := mgr.Add(watch); err != nil {
		return fmt.Errorf("watch for KEDA: %w", err)
	}
	log.Info("controller starting", "image", o.reconciler.Image, "activatorHost", o.reconciler.ActivatorHost,
		"autoscalerAddress", o.reconciler.AutoscalerAddress, "keda", keda, "admin", o.admin, "leaderElection", o.leaderElect)
	err = mgr.Start(ctx)
	if errors.Is(err, controller.ErrKEDAChanged) {
		// Planned: the Deployment starts the controller again.
		log.Info("controller exiting for a restart", "reason", err.Error())
		return nil
	}
	return err
}
