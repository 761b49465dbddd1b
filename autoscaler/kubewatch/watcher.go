// Package kubewatch feeds the autoscaler from Kubernetes: the Functions to
// scale, who writes each one's replicas (ReplicaRouter), and the queue-proxy
// admin addresses of each function's ready instances, from the
// EndpointSlices of the functions' Services (label sless.dev/function).
package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/wire"
)

// Target is what the watcher feeds: *autoscaler.Autoscaler.
type Target interface {
	SetFunction(now time.Time, fn autoscaler.Function)
	RemoveFunction(namespace, name string)
	SetInstances(namespace, name string, admins []string)
}

// Watcher pushes the cluster's valid Functions, their owners and their
// ready instances to a Target and a ReplicaRouter as they change. A
// Function that fails validation is not scaled (the controller reports why
// in its status).
type Watcher struct {
	cache  cache.Cache
	target Target
	router *ReplicaRouter
	log    *slog.Logger

	// SyncTimeout bounds the first list of the watched objects. A cache
	// that cannot list (its ServiceAccount lacks RBAC, or the API server
	// is unreachable) would otherwise keep the leader waiting forever,
	// holding the Lease and scaling nothing. Set before Run.
	SyncTimeout time.Duration

	// Crons, when set before Run, gets every valid Function's cron
	// triggers: the leader's scheduler.
	Crons CronTarget

	// mu serialises what is pushed, so that of two reads of a function's
	// EndpointSlices the later one is pushed last.
	mu    sync.Mutex
	known map[types.NamespacedName]autoscaler.Function
	crons map[types.NamespacedName][]cronSpec // what Crons was last given
}

// CronTarget schedules functions' cron triggers: *scheduler.Scheduler.
type CronTarget interface {
	Set(ctx context.Context, namespace, function string, triggers []scheduler.Trigger)
	Remove(namespace, function string)
}

// New returns a watcher using cfg to reach the API server. It caches the
// Functions and only the EndpointSlices labelled wire.FunctionLabel.
func New(cfg *rest.Config, target Target, router *ReplicaRouter, log *slog.Logger) (*Watcher, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, discoveryv1.AddToScheme, appsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	labelled, err := labels.NewRequirement(wire.FunctionLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*labelled)},
		&appsv1.Deployment{}:         {Label: labels.NewSelector().Add(*labelled)},
	}})
	if err != nil {
		return nil, fmt.Errorf("autoscaler watch cache: %w", err)
	}
	return &Watcher{cache: c, target: target, router: router, log: log, SyncTimeout: cachesync.DefaultTimeout,
		known: map[types.NamespacedName]autoscaler.Function{}, crons: map[types.NamespacedName][]cronSpec{}}, nil
}

// Deployments reads the functions' Deployments (labelled wire.FunctionLabel)
// from the watch cache, for KubernetesScaler.Reader: deciding then reads
// nothing from the API server.
func (w *Watcher) Deployments() client.Reader { return w.cache }

// Run starts the watch and returns once the Functions that exist and their
// instances have been pushed; the watch goes on until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	fns, err := w.cache.GetInformer(ctx, &v1alpha1.Function{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("functions informer: %w", err)
	}
	eps, err := w.cache.GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("endpointslices informer: %w", err)
	}
	if _, err := w.cache.GetInformer(ctx, &appsv1.Deployment{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("deployments informer: %w", err)
	}
	go func() {
		if err := w.cache.Start(ctx); err != nil {
			w.log.Error("autoscaler watch cache stopped", "err", err)
		}
	}()
	if err := cachesync.Wait(ctx, w.SyncTimeout, w.cache.WaitForCacheSync,
		"autoscaler", "functions.sless.dev, endpointslices and deployments"); err != nil {
		return err
	}
	// The handlers come after the sync, so that a function's instances
	// are read from a complete cache when the function is first pushed.
	slicesReg, err := eps.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.sliceChanged,
		UpdateFunc: func(_, obj any) { w.sliceChanged(obj) },
		DeleteFunc: w.sliceChanged,
	})
	if err != nil {
		return fmt.Errorf("endpointslices informer: %w", err)
	}
	fnsReg, err := fns.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.setFunction,
		UpdateFunc: func(_, obj any) { w.setFunction(obj) },
		DeleteFunc: w.removeFunction,
	})
	if err != nil {
		return fmt.Errorf("functions informer: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), slicesReg.HasSynced, fnsReg.HasSynced) {
		return fmt.Errorf("autoscaler watch: initial state not pushed: %w", ctx.Err())
	}
	return nil
}
