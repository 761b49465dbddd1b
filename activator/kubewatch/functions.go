package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/activator"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/cachesync"
)

// FunctionSink receives the Functions to serve, and why one cannot be
// served while its instances fail (activator.Activator.SetUnavailable).
type FunctionSink interface {
	SetFunction(activator.Function)
	RemoveFunction(namespace, name string)
	SetUnavailable(namespace, name, cause string)
}

// Functions pushes the cluster's valid Functions to a FunctionSink as they
// are created, changed and deleted. A Function that fails validation is not
// served (the controller reports why in its status).
type Functions struct {
	cache cache.Cache
	sink  FunctionSink
	log   *slog.Logger

	// SyncTimeout bounds the first list (cachesync.DefaultTimeout); set
	// before Run.
	SyncTimeout time.Duration
}

// NewFunctions returns a watcher of Functions using cfg to reach the API
// server.
func NewFunctions(cfg *rest.Config, sink FunctionSink, log *slog.Logger) (*Functions, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("functions cache: %w", err)
	}
	return &Functions{cache: c, sink: sink, log: log, SyncTimeout: cachesync.DefaultTimeout}, nil
}

// Run starts the watch and returns once the Functions that exist have been
// pushed; the watch goes on until ctx ends.
func (f *Functions) Run(ctx context.Context) error {
	inf, err := f.cache.GetInformer(ctx, &v1alpha1.Function{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("functions informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    f.set,
		UpdateFunc: func(_, obj any) { f.set(obj) },
		DeleteFunc: f.remove,
	})
	if err != nil {
		return fmt.Errorf("functions informer: %w", err)
	}
	go func() {
		if err := f.cache.Start(ctx); err != nil {
			f.log.Error("functions cache stopped", "err", err)
		}
	}()
	return cachesync.Wait(ctx, f.SyncTimeout, f.cache.WaitForCacheSync, "activator", "functions.sless.dev")
}

// Reader reads the Functions the watch holds: the admin API's view of the
// cluster, without a request to the API server per read.
func (f *Functions) Reader() client.Reader { return f.cache }

func (f *Functions) set(obj any) {
	fn, ok := obj.(*v1alpha1.Function)
	if !ok {
		return
	}
	fn = fn.DeepCopy()
	fn.Default()
	if errs := v1alpha1.Validate(fn, v1alpha1.ModeKubernetes); len(errs) > 0 {
		f.log.Info("not serving an invalid function", "namespace", fn.Namespace, "function", fn.Name, "err", errs.ToAggregate())
		f.sink.RemoveFunction(fn.Namespace, fn.Name)
		return
	}
	f.sink.SetFunction(activator.FunctionFor(fn))
	// The controller reads the pods: an image that cannot be pulled or an
	// instance that crashes fails requests at once, with the cause.
	_, cause, _ := fn.Status.InstancesFailing()
	f.sink.SetUnavailable(fn.Namespace, fn.Name, cause)
}

func (f *Functions) remove(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fn, ok := obj.(*v1alpha1.Function); ok {
		f.sink.RemoveFunction(fn.Namespace, fn.Name)
	}
}
