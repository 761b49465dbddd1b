// Package kubewatch feeds the activator from Kubernetes: the Functions it
// serves, and which instances of each are ready, from the EndpointSlices
// of the functions' Services (label sless.dev/function).
package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listers "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/endpointslice"
	"sless.dev/sless/internal/wire"
)

// EndpointSink receives the ready instances of a function.
type EndpointSink interface {
	SetEndpoints(namespace, name string, addrs []string)
}

// Endpoints pushes each function's ready endpoints to a Sink as the
// EndpointSlices change: an endpoint counts when it is ready and not
// terminating, so an instance being drained gets no new requests, or when
// it is starting and its queue-proxy answers that it is ready (see
// starting.go), before the kubelet's probe and the slice say so.
type Endpoints struct {
	client kubernetes.Interface
	sink   EndpointSink
	log    *slog.Logger
	lister listers.EndpointSliceLister
	probes *startingProbes

	// SyncTimeout bounds the first list (cachesync.DefaultTimeout); set
	// before Run.
	SyncTimeout time.Duration
	// Dial reaches starting instances' queue-proxies for their probes
	// (a net.Dialer's by default); set before Run.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewEndpoints returns a watcher using cfg to reach the API server.
func NewEndpoints(cfg *rest.Config, sink EndpointSink, log *slog.Logger) (*Endpoints, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("endpointslices: %w", err)
	}
	return &Endpoints{client: client, sink: sink, log: log, SyncTimeout: cachesync.DefaultTimeout}, nil
}

// Run watches until ctx ends. It returns once the watch is set up and the
// initial state has been pushed, or with an error; the watch goes on in
// the background until ctx ends.
func (w *Endpoints) Run(ctx context.Context) error {
	dial := w.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	w.probes = &startingProbes{functions: map[[2]string]*functionEndpoints{}, probe: httpReadyProbe(dial),
		push: w.sink.SetEndpoints, ctx: ctx}
	return watchSlices(ctx, w.client, w.SyncTimeout, "endpointslices", &w.lister, w.changed,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = wire.FunctionLabel }))
}

// watchSlices runs an EndpointSlice informer with opts, setting *lister
// to its lister before any event, calling changed with each slice added,
// updated or deleted, and returns once the first list is in, within
// timeout (what names the watch in errors).
func watchSlices(ctx context.Context, client kubernetes.Interface, timeout time.Duration, what string,
	lister *listers.EndpointSliceLister, changed func(obj any), opts ...informers.SharedInformerOption) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
	inf := factory.Discovery().V1().EndpointSlices()
	*lister = inf.Lister()
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	factory.Start(ctx.Done())
	synced := func(ctx context.Context) bool {
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return false
			}
		}
		return true
	}
	return cachesync.Wait(ctx, timeout, synced, "activator", what)
}

func (w *Endpoints) changed(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := slice.Labels[wire.FunctionLabel]
	if name == "" {
		return
	}
	all, err := w.lister.EndpointSlices(slice.Namespace).List(labels.SelectorFromSet(labels.Set{wire.FunctionLabel: name}))
	if err != nil {
		w.log.Error("list endpoint slices", "namespace", slice.Namespace, "function", name, "err", err)
		return
	}
	w.probes.set(slice.Namespace, name, endpointslice.ReadyAddrs(all, wire.ServingPortName, 0), startingAddrs(all))
}
