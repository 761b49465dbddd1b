package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/endpointslice"
	"sless.dev/sless/internal/wire"
)

// AutoscalerSink is what the autoscaler's feed tells: *autoscaler.Autoscaler.
type AutoscalerSink interface {
	SetFunction(now time.Time, fn autoscaler.Target)
	RemoveFunction(namespace, name string)
	SetInstances(namespace, name string, admins []string)
}

// AutoscalerFeed pushes the cluster's valid Functions, their owners and
// the queue-proxy admin addresses of their ready instances to an
// AutoscalerSink and a ReplicaRouter as they change. A Function that fails
// validation is not scaled (the controller reports why in its status).
type AutoscalerFeed struct {
	feed   *feed
	sink   AutoscalerSink
	router *ReplicaRouter

	// SyncTimeout bounds the first list of the watched objects. A cache
	// that cannot list (its ServiceAccount lacks RBAC, or the API server
	// is unreachable) would otherwise keep the replica waiting forever,
	// never ready, scaling nothing. Set before Run.
	SyncTimeout time.Duration

	// Crons, when set before Run, gets every valid Function's cron
	// triggers: the replica's scheduler.
	Crons CronTarget

	// Owns, when set before Run, says which Functions this replica
	// scales (autoscaler/shard): the others are not pushed, and Resync
	// follows a change of it. Nil scales every one.
	Owns func(namespace, name string) bool

	// mu serialises what is pushed, so that of two reads of a function's
	// EndpointSlices the later one is pushed last.
	mu    sync.Mutex
	known map[types.NamespacedName]autoscaler.Target
	crons map[types.NamespacedName][]cronSpec // what Crons was last given
}

// CronTarget schedules functions' cron triggers: *scheduler.Scheduler.
type CronTarget interface {
	Set(ctx context.Context, namespace, function string, triggers []scheduler.Trigger)
	Remove(namespace, function string)
}

// NewAutoscalerFeed returns the autoscaler's feed, using cfg to reach the
// API server. Its cache holds the Functions, and the EndpointSlices and
// Deployments labelled wire.FunctionLabel.
func NewAutoscalerFeed(cfg *rest.Config, sink AutoscalerSink, router *ReplicaRouter, log *slog.Logger) (*AutoscalerFeed, error) {
	f, err := newFeed(cfg, "autoscaler", "scaling", true, log)
	if err != nil {
		return nil, err
	}
	return &AutoscalerFeed{feed: f, sink: sink, router: router, SyncTimeout: cachesync.DefaultTimeout,
		known: map[types.NamespacedName]autoscaler.Target{}, crons: map[types.NamespacedName][]cronSpec{}}, nil
}

// Deployments reads the functions' Deployments (labelled wire.FunctionLabel)
// from the watch cache, for KubernetesScaler.Reader: deciding then reads
// nothing from the API server.
func (f *AutoscalerFeed) Deployments() client.Reader { return f.feed.cache }

// Run starts the watch and returns once the Functions that exist and their
// instances have been pushed; the watch goes on until ctx ends.
func (f *AutoscalerFeed) Run(ctx context.Context) error {
	return f.feed.run(ctx, f.SyncTimeout, f)
}

// setFunction pushes a created or changed Function. The sink gets it
// only when what the autoscaler needs of it changed, since SetFunction
// starts the function's decider afresh; a function new to the sink gets
// its instances too, as the sink knows none of a function it does not
// scale.
func (f *AutoscalerFeed) setFunction(fn *v1alpha1.Function) {
	key := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	if f.Owns != nil && !f.Owns(fn.Namespace, fn.Name) {
		f.removeFunction(key)
		return
	}
	want := autoscaler.TargetFor(fn)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setCrons(key, fn)
	// The owner first: the sink may decide as soon as it has the function.
	f.router.setOwner(key, ownedByKEDA(fn), f.replicas(key, fn))
	had, known := f.known[key]
	if known && reflect.DeepEqual(had, want) {
		return
	}
	f.known[key] = want
	f.sink.SetFunction(time.Now(), want)
	if !known {
		f.pushInstances(key)
	}
}

// Resync pushes again every Function in the cache, and drops the ones
// pushed that are gone or no longer owned: after Owns changed. A
// function pushed again with nothing changed is not restarted; one newly
// owned starts afresh.
func (f *AutoscalerFeed) Resync(ctx context.Context) error {
	var fns v1alpha1.FunctionList
	// Not copied: setFunction copies what it keeps.
	if err := f.feed.cache.List(ctx, &fns, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list functions: %w", err)
	}
	listed := make(map[types.NamespacedName]bool, len(fns.Items))
	for i := range fns.Items {
		fn := &fns.Items[i]
		listed[types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}] = true
		f.feed.setFunction(fn, f)
	}
	for _, key := range f.knownKeys() {
		if !listed[key] {
			f.removeFunction(key)
		}
	}
	return nil
}

func (f *AutoscalerFeed) knownKeys() []types.NamespacedName {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Keys(f.known))
}

// replicas is what a function has now: its Deployment's replicas, or its
// minimum before the controller has made one.
func (f *AutoscalerFeed) replicas(key types.NamespacedName, fn *v1alpha1.Function) int32 {
	var dep appsv1.Deployment
	if err := f.feed.cache.Get(context.Background(), key, &dep); err != nil || dep.Spec.Replicas == nil {
		return fn.Spec.Scale.Min
	}
	return *dep.Spec.Replicas
}

// removeFunction stops scaling a function that is deleted or no longer
// valid.
func (f *AutoscalerFeed) removeFunction(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.router.remove(key)
	if _, known := f.crons[key]; known && f.Crons != nil {
		delete(f.crons, key)
		f.Crons.Remove(key.Namespace, key.Name)
	}
	if _, known := f.known[key]; known {
		delete(f.known, key)
		f.sink.RemoveFunction(key.Namespace, key.Name)
	}
}

func (f *AutoscalerFeed) slicesChanged(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, known := f.known[key]; known {
		f.pushInstances(key)
	}
}

// pushInstances reads a function's EndpointSlices from the cache and
// pushes its ready instances' admin addresses. f.mu must be held.
func (f *AutoscalerFeed) pushInstances(key types.NamespacedName) {
	all, err := f.feed.slices(key)
	if err != nil {
		f.feed.log.Error("list endpoint slices", "namespace", key.Namespace, "function", key.Name, "err", err)
		return
	}
	f.sink.SetInstances(key.Namespace, key.Name, endpointslice.ReadyAddrs(all, wire.AdminPortName, wire.AdminPort))
}
