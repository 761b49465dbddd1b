// Package controller turns Functions into what runs them on Kubernetes: a
// Deployment of the function's image beside a queue-proxy sidecar, a
// Service whose EndpointSlices tell the activator and the autoscaler where
// the ready instances are, and, when KEDA writes the replicas, a KEDA
// ScaledObject with its TriggerAuthentications. It reports what it did and
// saw in the Function's status.
package controller

import (
	"context"
	"errors"
	"fmt"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/cachetrim"
	"sless.dev/sless/internal/wire"
)

// Name is the controller's name: in logs, metrics, events and the leader
// election lease.
const Name = "sless-controller"

// Defaults of Options, matching the names config/ gives the components.
const (
	DefaultActivatorHost     = "sless-activator.sless-system.svc"
	DefaultAutoscalerAddress = "sless-autoscaler.sless-system.svc:9095"
	DefaultRecordsURL        = "http://sless-activator.sless-system.svc:9090"
	DefaultWorkers           = 8
)

// Options configure the reconciler.
type Options struct {
	// Image is the sless image; the queue-proxy sidecar runs its
	// "queue-proxy" subcommand. `sless controller` makes it its own
	// image (OwnImage) unless told otherwise.
	Image string
	// ActivatorHost is the activator's host (and port, unless 80) as
	// callers reach it; status.url is http://<ActivatorHost>/fn/<ns>/<name>.
	ActivatorHost string
	// AutoscalerAddress is the gRPC address (host:port) of the autoscaler's
	// KEDA external scaler, written into every ScaledObject.
	AutoscalerAddress string
	// KEDA tells whether KEDA's CRDs are installed. Without them, Functions
	// that need KEDA get ScalingReady=False and everything else still runs.
	KEDA bool
	// Workers is how many Functions are reconciled at once.
	Workers int
	// RecordsURL is the activators' admin API, where the queue-proxies of
	// functions with RabbitMQ triggers send their records.
	RecordsURL string
	// Brokers checks RabbitMQ triggers' brokers and queues (an AMQP dial
	// when nil).
	Brokers BrokerChecker
}

// ManagerOptions are the manager options the reconciler needs: a scheme
// with Kubernetes', sless's and KEDA's types, and a cache that holds only
// the objects labelled as a Function's rather than every Deployment and
// Service of the cluster. keda says whether KEDA is installed (see
// KEDAInstalled); the cache cannot even be configured for kinds the API
// server does not serve. Callers add leader election, metrics and probes.
func ManagerOptions(keda bool) (manager.Options, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, kedav1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return manager.Options{}, fmt.Errorf("controller scheme: %w", err)
		}
	}
	labelled, err := labels.NewRequirement(wire.FunctionLabel, selection.Exists, nil)
	if err != nil {
		return manager.Options{}, err
	}
	owned := cache.ByObject{Label: labels.NewSelector().Add(*labelled)}
	byObject := map[client.Object]cache.ByObject{&appsv1.Deployment{}: owned, &corev1.Service{}: owned, &corev1.Pod{}: owned}
	if keda {
		byObject[&kedav1alpha1.ScaledObject{}] = owned
		byObject[&kedav1alpha1.TriggerAuthentication{}] = owned
	}
	return manager.Options{Scheme: scheme, Cache: cache.Options{ByObject: byObject, DefaultTransform: cachetrim.Transform}}, nil
}

// The ClusterRole of the controller (config/rbac/role.yaml, `make
// generate`): what the reconciler reads and writes, nothing more. Owner
// references that block their owner's deletion need update on the owner's
// finalizers where the OwnerReferencesPermissionEnforcement admission
// plugin runs. Pods are read for the controller's own image (OwnImage);
// list and watch are for watching the Functions' pods. Leader election's
// Lease is in config/rbac, namespaced.
//
// +kubebuilder:rbac:groups=sless.dev,resources=functions,verbs=get;list;watch
// +kubebuilder:rbac:groups=sless.dev,resources=functions/status;functions/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects;triggerauthentications,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// FunctionReconciler makes the cluster match each Function. It keeps no
// state between reconciles: everything it needs is read from the cache.
type FunctionReconciler struct {
	client client.Client
	// apiReader reads past the cache, to tell a stale cache from an
	// object someone else owns when a create finds the name taken.
	apiReader client.Reader
	events    events.EventRecorder
	opts      Options
}

// New returns a reconciler that uses mgr's client, cache and event
// recorder. The manager needs the scheme and cache of ManagerOptions.
func New(mgr manager.Manager, opts Options) *FunctionReconciler {
	if opts.Workers < 1 {
		opts.Workers = DefaultWorkers
	}
	if opts.Brokers == nil {
		opts.Brokers = NewAMQPChecker()
	}
	return &FunctionReconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		events:    mgr.GetEventRecorder(Name),
		opts:      opts,
	}
}

// SetupWithManager registers the reconciler: it runs on every change of a
// Function, of the objects it created and of their pods.
func (r *FunctionReconciler) SetupWithManager(mgr manager.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("function").
		For(&v1alpha1.Function{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		// The pods, owned through ReplicaSets, say when instances cannot
		// start (ConditionInstancesReady).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podsOfFunction)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers})
	if r.opts.KEDA {
		b = b.Owns(&kedav1alpha1.ScaledObject{}).Owns(&kedav1alpha1.TriggerAuthentication{})
	}
	return b.Complete(r)
}

// Reconcile brings one Function's objects and status up to date. An
// invalid Function gets Ready=False and nothing else is touched.
func (r *FunctionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fn v1alpha1.Function
	if err := r.client.Get(ctx, req.NamespacedName, &fn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fn.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // garbage collection removes what it owns
	}
	// The API server defaults stored Functions; defaulting again covers
	// objects stored before a default was added.
	spec := fn.DeepCopy()
	spec.Default()
	status := fn.Status.DeepCopy()
	status.ObservedGeneration = fn.Generation
	if errs := v1alpha1.Validate(spec, v1alpha1.ModeKubernetes); len(errs) > 0 {
		setCondition(status, fn.Generation, invalid(errs.ToAggregate().Error()))
		return ctrl.Result{}, r.writeStatus(ctx, &fn, status)
	}
	observed, err := r.ensureObjects(ctx, &fn, spec)
	var conflict *conflictError
	switch {
	case errors.As(err, &conflict):
		setCondition(status, fn.Generation, notReady(v1alpha1.ReasonResourceConflict, conflict.Error()))
		if werr := r.writeStatus(ctx, &fn, status); werr != nil {
			return ctrl.Result{}, werr
		}
		return ctrl.Result{}, err // retried with backoff until the name is free
	case apierrors.IsInvalid(err):
		// The API server refused an object made from the Function, for
		// a value the shared validation lets through (a limit below its
		// request). Retrying cannot help; changing the Function brings
		// the next reconcile. Objects written before stay as they were.
		setCondition(status, fn.Generation, invalid(err.Error()))
		return ctrl.Result{}, r.writeStatus(ctx, &fn, status)
	case err != nil:
		return ctrl.Result{}, err
	}
	var result ctrl.Result
	if result.RequeueAfter, err = r.observeInstances(ctx, spec, &observed); err != nil {
		return ctrl.Result{}, err
	}
	observed.apply(status, spec, r.opts.ActivatorHost, fn.Generation)
	if failing := r.checkTriggers(ctx, spec, status); failing && (result.RequeueAfter == 0 || triggerRecheck < result.RequeueAfter) {
		result.RequeueAfter = triggerRecheck // a fixed Secret or queue is seen without an event
	}
	return result, r.writeStatus(ctx, &fn, status)
}

// ensureObjects creates or updates the Deployment, the Service and the KEDA
// objects of a valid, defaulted Function, and returns what it saw of them.
func (r *FunctionReconciler) ensureObjects(ctx context.Context, fn, spec *v1alpha1.Function) (observed, error) {
	var o observed
	var err error
	if o.deployment, err = ensure(ctx, r, fn, r.deployment(spec), &appsv1.Deployment{}, deploymentPart); err != nil {
		return o, err
	}
	if _, err = ensure(ctx, r, fn, service(spec), &corev1.Service{}, servicePart); err != nil {
		return o, err
	}
	o.needsKEDA, o.kedaInstalled = needsKEDA(spec), r.opts.KEDA
	if !r.opts.KEDA {
		return o, nil
	}
	o.scaledObject, err = r.ensureKEDA(ctx, fn, spec)
	return o, err
}

// writeStatus writes status when it differs from the Function's, so that a
// steady cluster makes no writes, and records an event when Ready changes.
func (r *FunctionReconciler) writeStatus(ctx context.Context, fn *v1alpha1.Function, status *v1alpha1.FunctionStatus) error {
	if equality.Semantic.DeepEqual(&fn.Status, status) {
		return nil
	}
	updated := fn.DeepCopy()
	updated.Status = *status
	err := r.client.Status().Update(ctx, updated)
	if apierrors.IsConflict(err) {
		// The cache is behind: the newer Function is on its way and
		// brings another reconcile.
		return nil
	}
	if err != nil {
		return fmt.Errorf("write status of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	r.readyEvent(fn, status)
	return nil
}
