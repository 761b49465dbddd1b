package kubewatch

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/wire"
)

// Probing of starting instances. The kubelet probes a pod's readiness at
// most once a second, and the EndpointSlice that says so takes a moment
// more to arrive: at a cold start that is most of what sless adds to the
// pod's own start. So, as Knative's activator does, the activator probes
// the queue-proxy of each instance that is starting (in a slice, not
// ready, not terminating) itself, every startProbeInterval, and routes to
// it as soon as its /readyz says so: the same check the kubelet makes.
const (
	startProbeInterval = 20 * time.Millisecond
	startProbeTimeout  = 250 * time.Millisecond
	// startProbeFor bounds the probing of one instance: one that is not
	// ready by then is left to the kubelet's probe.
	startProbeFor = 10 * time.Minute
)

// starting is an instance probed while it starts.
type starting struct {
	cancel context.CancelFunc
	ready  bool // its queue-proxy said it is ready
}

// functionEndpoints is what the watch knows of one function's instances.
type functionEndpoints struct {
	ready    []string             // the slices' ready addresses (serving port)
	starting map[string]*starting // by serving address
}

// addrs is the function's instances that take traffic: ready by the
// slices, or found ready by a probe.
func (f *functionEndpoints) addrs() []string {
	out := slices.Clone(f.ready)
	for addr, s := range f.starting {
		if s.ready {
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// startingAddrs lists, for each endpoint that is starting, its serving
// address and its queue-proxy's admin address.
func startingAddrs(all []*discoveryv1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, s := range all {
		serving, admin := slicePort(s, wire.ServingPortName), slicePort(s, wire.AdminPortName)
		if serving == 0 || admin == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			if c.Ready == nil || *c.Ready || (c.Terminating != nil && *c.Terminating) {
				continue
			}
			for _, a := range e.Addresses {
				out[net.JoinHostPort(a, strconv.Itoa(int(serving)))] = net.JoinHostPort(a, strconv.Itoa(int(admin)))
			}
		}
	}
	return out
}

func slicePort(s *discoveryv1.EndpointSlice, name string) int32 {
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == name && p.Port != nil {
			return *p.Port
		}
	}
	return 0
}

// readyProbe asks a queue-proxy's admin address whether it is ready.
type readyProbe func(ctx context.Context, admin string) bool

// httpReadyProbe is readyProbe over HTTP, dialling with dial.
func httpReadyProbe(dial func(ctx context.Context, network, addr string) (net.Conn, error)) readyProbe {
	client := &http.Client{Timeout: startProbeTimeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	return func(ctx context.Context, admin string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/readyz", nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// probeUntilReady probes admin every startProbeInterval until it is
// ready (then calls found), ctx ends or startProbeFor passes.
func probeUntilReady(ctx context.Context, probe readyProbe, admin string, found func()) {
	ctx, cancel := context.WithTimeout(ctx, startProbeFor)
	defer cancel()
	t := time.NewTicker(startProbeInterval)
	defer t.Stop()
	for {
		if probe(ctx, admin) {
			found()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startingProbes keeps each function's endpoints and the probes of its
// starting instances, and pushes what takes traffic. One lock over all:
// a change is a few map operations, and pushes stay in order.
type startingProbes struct {
	mu        sync.Mutex
	functions map[types.NamespacedName]*functionEndpoints
	probe     readyProbe
	push      func(namespace, name string, addrs []string)
	ctx       context.Context // the watch's: probes end with it
}

// set records a function's slices: probes start for new starting
// instances and end for those gone, ready or terminating.
func (p *startingProbes) set(key types.NamespacedName, ready []string, admins map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.functions[key]
	if f == nil {
		f = &functionEndpoints{starting: map[string]*starting{}}
		p.functions[key] = f
	}
	f.ready = ready
	for addr, s := range f.starting {
		if _, still := admins[addr]; !still {
			s.cancel()
			delete(f.starting, addr)
		}
	}
	for addr, admin := range admins {
		if _, probing := f.starting[addr]; probing {
			continue
		}
		ctx, cancel := context.WithCancel(p.ctx)
		s := &starting{cancel: cancel}
		f.starting[addr] = s
		go probeUntilReady(ctx, p.probe, admin, func() { p.found(key, addr, s) })
	}
	p.push(key.Namespace, key.Name, f.addrs())
	if len(f.ready) == 0 && len(f.starting) == 0 {
		delete(p.functions, key)
	}
}

// found marks a starting instance ready, if it is still the one probed.
func (p *startingProbes) found(key types.NamespacedName, addr string, s *starting) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.functions[key]
	if f == nil || f.starting[addr] != s {
		return
	}
	s.ready = true
	p.push(key.Namespace, key.Name, f.addrs())
}
