package kedascaler

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"sless.dev/sless/autoscaler/shard"
)

// owners is who scales every function, as both replicas of a test see it
// (the Coordinator's answer, which its own tests check).
type owners struct {
	mu    sync.Mutex
	owner string
	self  string
	addrs map[string]string
}

func (o *owners) Owns(string, string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner == o.self
}

func (o *owners) Owner(string, string) (shard.Member, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	addr, ok := o.addrs[o.owner]
	return shard.Member{Name: o.owner, GRPC: addr}, ok
}

func (o *owners) move(to string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.owner = to
}

// replicaPair is two replicas, a and b, each a Server behind a Forwarder
// on a real gRPC server, and a client of each.
type replicaPair struct {
	srv     map[string]*Server
	owners  map[string]*owners
	clients map[string]externalscaler.ExternalScalerClient
}

func newPair(t *testing.T, owner string) *replicaPair {
	t.Helper()
	p := &replicaPair{srv: map[string]*Server{}, owners: map[string]*owners{}, clients: map[string]externalscaler.ExternalScalerClient{}}
	addrs := map[string]string{}
	lis := map[string]net.Listener{}
	for _, name := range []string{"a", "b"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[name], addrs[name] = l, l.Addr().String()
	}
	for _, name := range []string{"a", "b"} {
		srv, own := newServer(), &owners{owner: owner, self: name, addrs: addrs}
		fwd := &Forwarder{Local: srv, Owners: own}
		t.Cleanup(fwd.Close) // after the server stops: cleanups run last first
		p.srv[name], p.owners[name], p.clients[name] = srv, own, serveScaler(t, lis[name], fwd, srv)
	}
	return p
}

// TestForwarderPassesCallsOn: a call to the replica that does not scale
// the function is answered by the one that does; a call passed on once
// is answered where it lands, never passed on again.
func TestForwarderPassesCallsOn(t *testing.T) {
	p := newPair(t, "b")
	p.srv["b"].Know("default", "hello", 3)
	m, err := p.clients["a"].GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref("default", "hello")})
	if err != nil || len(m.MetricValues) != 1 || m.MetricValues[0].MetricValue != 3 {
		t.Fatalf("GetMetrics through a: %v %v, want b's 3", m, err)
	}
	active, err := p.clients["a"].IsActive(t.Context(), ref("default", "hello"))
	if err != nil || !active.Result {
		t.Fatalf("IsActive through a: %v %v, want b's true", active, err)
	}
	// a believes b scales it, b believes a does: b answers itself.
	p.owners["b"].move("a")
	ctx := metadata.AppendToOutgoingContext(t.Context(), forwardedKey, "1")
	if _, err := p.clients["b"].IsActive(ctx, ref("default", "hello")); status.Code(err) != codes.OK {
		t.Errorf("a call passed on to b, which knows the function: %v, want b's own answer", err)
	}
	p.owners["a"].move("nobody")
	if _, err := p.clients["a"].IsActive(t.Context(), ref("default", "hello")); status.Code(err) != codes.Unavailable {
		t.Errorf("a call while no replica scales the function: %v, want Unavailable", err)
	}
}

// TestForwarderRelaysStreams: an activation stream opened on the replica
// that does not scale the function carries the owner's pushes; when the
// function moves, the owner ends it with Unavailable, so KEDA calls again.
func TestForwarderRelaysStreams(t *testing.T) {
	p := newPair(t, "b")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := p.clients["a"].StreamIsActive(ctx, ref("default", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("the relayed stream's headers: %v", err)
	}
	if _, err := p.srv["b"].Scale(t.Context(), "default", "hello", 2); err != nil {
		t.Fatal(err)
	}
	if msg, err := stream.Recv(); err != nil || !msg.Result {
		t.Fatalf("the owner's push through a: %v %v, want true", msg, err)
	}
	p.owners["a"].move("a")
	p.owners["b"].move("a")
	p.srv["b"].EndStreams(p.owners["b"].Owns)
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stream after the function moved: %v, want Unavailable", err)
	}
}
