package kubewatch

import (
	"context"
	"log/slog"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/activator"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/endpointslice"
	"sless.dev/sless/internal/wire"
)

// ActivatorSink receives the Functions to serve, why one cannot be served
// while its instances fail, and the instances that take each one's
// traffic: *activator.Activator.
type ActivatorSink interface {
	SetFunction(activator.RouteSpec)
	RemoveFunction(namespace, name string)
	SetUnavailable(namespace, name, cause string)
	SetEndpoints(namespace, name string, addrs []string)
}

// ActivatorFeed pushes the cluster's valid Functions to an ActivatorSink
// as they are created, changed and deleted, and each function's instances
// that take traffic as its EndpointSlices change. A Function that fails
// validation is not served (the controller reports why in its status). An
// instance takes traffic when its endpoint is ready and not terminating,
// so one being drained gets no new requests, or when it is starting and
// its queue-proxy answers that it is ready (see starting.go), before the
// kubelet's probe and the slice say so.
type ActivatorFeed struct {
	feed   *feed
	sink   ActivatorSink
	probes *startingProbes

	// SyncTimeout bounds the first list (cachesync.DefaultTimeout); set
	// before Run.
	SyncTimeout time.Duration
	// Dial reaches starting instances' queue-proxies for their probes
	// (a net.Dialer's by default); set before Run.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewActivatorFeed returns the activator's feed, using cfg to reach the
// API server.
func NewActivatorFeed(cfg *rest.Config, sink ActivatorSink, log *slog.Logger) (*ActivatorFeed, error) {
	f, err := newFeed(cfg, "activator", "serving", false, log)
	if err != nil {
		return nil, err
	}
	return &ActivatorFeed{feed: f, sink: sink, SyncTimeout: cachesync.DefaultTimeout}, nil
}

// Run starts the watch and returns once the Functions and the instances
// that exist have been pushed, or with an error; the watch goes on in the
// background until ctx ends.
func (f *ActivatorFeed) Run(ctx context.Context) error {
	dial := f.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	f.probes = &startingProbes{functions: map[types.NamespacedName]*functionEndpoints{}, probe: httpReadyProbe(dial),
		push: f.sink.SetEndpoints, ctx: ctx}
	return f.feed.run(ctx, f.SyncTimeout, f)
}

// Reader reads the Functions the watch holds: the admin API's view of the
// cluster, without a request to the API server per read.
func (f *ActivatorFeed) Reader() client.Reader { return f.feed.cache }

func (f *ActivatorFeed) setFunction(fn *v1alpha1.Function) {
	f.sink.SetFunction(activator.RouteSpecFor(fn))
	// The controller reads the pods: an image that cannot be pulled or an
	// instance that crashes fails requests at once, with the cause.
	_, cause, _ := fn.Status.InstancesFailing()
	f.sink.SetUnavailable(fn.Namespace, fn.Name, cause)
}

func (f *ActivatorFeed) removeFunction(key types.NamespacedName) {
	f.sink.RemoveFunction(key.Namespace, key.Name)
}

func (f *ActivatorFeed) slicesChanged(key types.NamespacedName) {
	all, err := f.feed.slices(key)
	if err != nil {
		f.feed.log.Error("list endpoint slices", "namespace", key.Namespace, "function", key.Name, "err", err)
		return
	}
	f.probes.set(key, endpointslice.ReadyAddrs(all, wire.ServingPortName, 0), startingAddrs(all))
}
