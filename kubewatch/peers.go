package kubewatch

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/activator"
	"sless.dev/sless/internal/cachesync"
	"sless.dev/sless/internal/cachetrim"
	"sless.dev/sless/internal/endpointslice"
	"sless.dev/sless/internal/wire"
)

// PeerSink learns the activators it shares instances with:
// *activator.Activator.
type PeerSink interface {
	SetPeers(activator.Peers)
}

// Peers tells an activator how many activators are ready and which of them
// it is, from the EndpointSlices of their own Service, as they change: each
// then admits its share of every instance's concurrency. An activator is
// known by its pod's IP; until its own endpoint is ready (its Service
// sends it nothing yet), it is not among them. Its cache is its own, of
// its namespace and Service only: a cache takes one label selector per
// type, and the ActivatorFeed's selects the functions' slices.
type Peers struct {
	cache              cache.Cache
	namespace, service string
	self               string // this activator's pod IP
	sink               PeerSink
	log                *slog.Logger
	mu                 sync.Mutex      // serialises changed: the informer's and Run's
	last               activator.Peers // what changed pushed last

	// SyncTimeout bounds the first list (cachesync.DefaultTimeout); set
	// before Run.
	SyncTimeout time.Duration
}

// NewPeers returns a watcher of the Service namespace/service whose
// endpoints are the activators, this one at selfIP.
func NewPeers(cfg *rest.Config, namespace, service, selfIP string, sink PeerSink, log *slog.Logger) (*Peers, error) {
	scheme := runtime.NewScheme()
	if err := discoveryv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}, DefaultTransform: cachetrim.Transform,
		ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {
			Label: labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})}}})
	if err != nil {
		return nil, fmt.Errorf("activator endpointslices cache: %w", err)
	}
	return &Peers{cache: c, namespace: namespace, service: service, self: selfIP, sink: sink, log: log,
		SyncTimeout: cachesync.DefaultTimeout}, nil
}

// Run watches until ctx ends. It returns once the watch is set up and the
// activators have been counted, or with an error.
func (w *Peers) Run(ctx context.Context) error {
	what := "endpointslices of " + w.namespace + "/" + w.service
	inf, err := w.cache.GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("%s informer: %w", what, err)
	}
	if err := startCache(ctx, w.cache, w.SyncTimeout, "activator", what, w.log); err != nil {
		return err
	}
	changed := func(any) { w.changed() }
	if _, err := onChange(inf, changed, changed); err != nil {
		return fmt.Errorf("%s informer: %w", what, err)
	}
	w.changed() // none yet is news too: this one alone
	return nil
}

// Others lists the admin addresses (host:port, the Service's port named
// "admin") of the ready activators other than this one: the peers whose
// views the admin API merges with its own.
func (w *Peers) Others() []string {
	all, err := listSlices(w.cache, client.InNamespace(w.namespace))
	if err != nil {
		w.log.Error("list activator endpoint slices", "err", err)
		return nil
	}
	addrs := endpointslice.ReadyAddrs(all, wire.AdminPortName, 0)
	return slices.DeleteFunc(addrs, func(addr string) bool {
		host, _, _ := net.SplitHostPort(addr)
		return host == w.self
	})
}

func (w *Peers) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	all, err := listSlices(w.cache, client.InNamespace(w.namespace))
	if err != nil {
		w.log.Error("list activator endpoint slices", "err", err)
		return
	}
	peers := activator.Peers{Self: -1}
	for _, addr := range endpointslice.ReadyAddrs(all, "http", 0) {
		if host, _, _ := net.SplitHostPort(addr); host == w.self {
			peers.Self = peers.N
		}
		peers.N++
	}
	if peers != w.last {
		w.log.Info("activators sharing the instances", "activators", peers.N, "self", peers.Self)
		w.last = peers
	}
	w.sink.SetPeers(peers)
}
