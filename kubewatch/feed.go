// Package kubewatch feeds the activator and the autoscaler from the API
// server, on controller-runtime's cache as the controller is: the valid
// Functions, and each one's instances from the EndpointSlices of its
// Service (label sless.dev/function). Each process has its own cache; what
// it does with what it reads is its role's: ActivatorFeed (the Functions to
// serve and their ready instances, starting ones probed; Peers, the other
// activators) and AutoscalerFeed (the Functions to scale and their
// queue-proxies; ReplicaRouter and KubernetesScaler, who writes replicas
// and how).
package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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
	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/cachetrim"
	"sless.dev/sless/internal/wire"
)

// role is what a process does with its feed: *ActivatorFeed or
// *AutoscalerFeed. The feed calls it from the cache's event handlers.
type role interface {
	// setFunction takes a Function created or changed, defaulted and
	// valid: a copy the role may keep.
	setFunction(fn *v1alpha1.Function)
	// removeFunction takes a Function deleted, or changed so that it no
	// longer validates.
	removeFunction(key types.NamespacedName)
	// slicesChanged takes a function one of whose EndpointSlices was
	// created, changed or deleted; feed.slices reads them all.
	slicesChanged(key types.NamespacedName)
}

// feed is one process's watch of the Functions and their EndpointSlices
// (and, for the autoscaler, their Deployments) on one cache.
type feed struct {
	cache     cache.Cache
	log       *slog.Logger
	component string   // whose ServiceAccount a failed first sync names
	doing     string   // what the role does with a valid Function, for the log of an invalid one
	extra     []object // watched besides the Functions and their slices: only cached
}

// object is a type a feed watches, with its name for errors.
type object struct {
	obj  client.Object
	name string
}

var (
	functionType = object{&v1alpha1.Function{}, "functions.sless.dev"}
	sliceType    = object{&discoveryv1.EndpointSlice{}, "endpointslices"}
)

// newFeed returns a feed on a cache of the Functions and of the
// EndpointSlices labelled wire.FunctionLabel, and of the Deployments so
// labelled when deployments is set.
func newFeed(cfg *rest.Config, component, doing string, deployments bool, log *slog.Logger) (*feed, error) {
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
	f := &feed{log: log, component: component, doing: doing}
	byObject := map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*labelled)}}
	if deployments {
		f.extra = append(f.extra, object{&appsv1.Deployment{}, "deployments"})
		byObject[&appsv1.Deployment{}] = cache.ByObject{Label: labels.NewSelector().Add(*labelled), Transform: cachetrim.ScaleOnly}
	}
	f.cache, err = cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject, DefaultTransform: cachetrim.Transform})
	if err != nil {
		return nil, fmt.Errorf("%s watch cache: %w", component, err)
	}
	return f, nil
}

// run starts the cache and returns once it has synced, within timeout,
// and r has been told of every Function and EndpointSlice that exists; r
// is told of every change after, until ctx ends. The handlers come after
// the sync, so that r reads a function's slices from a complete cache
// when it is first told of the function.
func (f *feed) run(ctx context.Context, timeout time.Duration, r role) error {
	fns, err := f.cache.GetInformer(ctx, functionType.obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("%s informer: %w", functionType.name, err)
	}
	eps, err := f.cache.GetInformer(ctx, sliceType.obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("%s informer: %w", sliceType.name, err)
	}
	names := []string{functionType.name, sliceType.name}
	for _, t := range f.extra {
		if _, err := f.cache.GetInformer(ctx, t.obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("%s informer: %w", t.name, err)
		}
		names = append(names, t.name)
	}
	what := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	if err := startCache(ctx, f.cache, timeout, f.component, what, f.log); err != nil {
		return err
	}
	slicesReg, err := onChange(eps, func(obj any) { f.sliceChanged(obj, r) }, func(obj any) { f.sliceChanged(obj, r) })
	if err != nil {
		return fmt.Errorf("%s informer: %w", sliceType.name, err)
	}
	fnsReg, err := onChange(fns, func(obj any) { f.setFunction(obj, r) }, func(obj any) { f.removeFunction(obj, r) })
	if err != nil {
		return fmt.Errorf("%s informer: %w", functionType.name, err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), slicesReg.HasSynced, fnsReg.HasSynced) {
		return fmt.Errorf("%s watch: initial state not pushed: %w", f.component, ctx.Err())
	}
	return nil
}

func (f *feed) setFunction(obj any, r role) {
	fn, ok := obj.(*v1alpha1.Function)
	if !ok {
		return
	}
	fn = fn.DeepCopy()
	fn.Default()
	if errs := v1alpha1.Validate(fn, v1alpha1.ModeKubernetes); len(errs) > 0 {
		f.log.Info("not "+f.doing+" an invalid function", "namespace", fn.Namespace, "function", fn.Name, "err", errs.ToAggregate())
		r.removeFunction(types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name})
		return
	}
	r.setFunction(fn)
}

func (f *feed) removeFunction(obj any, r role) {
	if fn, ok := obj.(*v1alpha1.Function); ok {
		r.removeFunction(types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name})
	}
}

func (f *feed) sliceChanged(obj any, r role) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || slice.Labels[wire.FunctionLabel] == "" {
		return
	}
	r.slicesChanged(types.NamespacedName{Namespace: slice.Namespace, Name: slice.Labels[wire.FunctionLabel]})
}

// slices reads a function's EndpointSlices from the cache.
func (f *feed) slices(key types.NamespacedName) ([]*discoveryv1.EndpointSlice, error) {
	all, err := listSlices(f.cache, client.InNamespace(key.Namespace), client.MatchingLabels{wire.FunctionLabel: key.Name})
	if err != nil {
		return nil, fmt.Errorf("list endpoint slices of %s: %w", key, err)
	}
	return all, nil
}

// listSlices reads EndpointSlices from a synced cache: a read of local
// memory that neither blocks nor waits. They are the cache's own, not
// copies: read them, never change them.
func listSlices(c client.Reader, opts ...client.ListOption) ([]*discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// startCache starts c until ctx ends and waits for its first sync, within
// timeout (cachesync.Wait: an error names what component's ServiceAccount
// may need to list and watch).
func startCache(ctx context.Context, c cache.Cache, timeout time.Duration, component, what string, log *slog.Logger) error {
	go func() {
		if err := c.Start(ctx); err != nil {
			log.Error(component+" watch cache stopped", "watching", what, "err", err)
		}
	}()
	return cachesync.Wait(ctx, timeout, c.WaitForCacheSync, component, what)
}

// onChange calls changed with each object added or updated in inf, and
// removed with each one deleted (the last state known, when the delete
// itself was missed).
func onChange(inf cache.Informer, changed, removed func(obj any)) (toolscache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			removed(obj)
		},
	})
}
