package kedascaler

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"sless.dev/sless/autoscaler/shard"
)

// Owners says which replica scales a function (*shard.Coordinator).
type Owners interface {
	Owns(namespace, name string) bool
	Owner(namespace, name string) (shard.Member, bool)
}

// forwardedKey marks a call one replica passed on to another: the
// receiver answers it itself, so that two replicas that disagree for a
// moment cannot bounce it between them.
const forwardedKey = "sless-autoscaler-forwarded"

// maxPeerConns bounds the connections kept to peers: a few replicas, and
// the addresses of those that were replaced.
const maxPeerConns = 8

// Forwarder serves KEDA on every replica of a sharded autoscaler: a call
// for a function this replica scales is answered by Local, any other is
// passed on to the replica that does, so that KEDA may call any of them
// through the Service.
type Forwarder struct {
	externalscaler.UnimplementedExternalScalerServer
	Local  *Server
	Owners Owners

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// route is where fn's call goes: nil for here, else a peer's client.
func (f *Forwarder) route(ctx context.Context, ref *externalscaler.ScaledObjectRef) (externalscaler.ExternalScalerClient, error) {
	fn, err := target(ref)
	if err != nil || f.Owners.Owns(fn.Namespace, fn.Name) || forwarded(ctx) {
		return nil, err
	}
	owner, ok := f.Owners.Owner(fn.Namespace, fn.Name)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "no autoscaler replica scales %s now: its share is changing hands", fn)
	}
	conn, err := f.conn(owner.GRPC)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "autoscaler replica %s: %v", owner.Name, err)
	}
	return externalscaler.NewExternalScalerClient(conn), nil
}

func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

func outgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	if f.conns == nil || len(f.conns) >= maxPeerConns {
		f.closeConns()
		f.conns = map[string]*grpc.ClientConn{}
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// Close closes the connections to peers.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeConns()
}

func (f *Forwarder) closeConns() {
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

func (f *Forwarder) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	peer, err := f.route(ctx, ref)
	switch {
	case err != nil:
		return nil, err
	case peer == nil:
		return f.Local.IsActive(ctx, ref)
	}
	return peer.IsActive(outgoing(ctx), ref)
}

// GetMetricSpec is answered here: it depends on the request alone.
func (f *Forwarder) GetMetricSpec(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	return f.Local.GetMetricSpec(ctx, ref)
}

func (f *Forwarder) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	peer, err := f.route(ctx, req.GetScaledObjectRef())
	switch {
	case err != nil:
		return nil, err
	case peer == nil:
		return f.Local.GetMetrics(ctx, req)
	}
	return peer.GetMetrics(outgoing(ctx), req)
}

// StreamIsActive relays the stream of the replica that scales the
// function. When the function moves, that replica ends it with
// Unavailable, which reaches KEDA, and KEDA calls again.
func (f *Forwarder) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	peer, err := f.route(stream.Context(), ref)
	switch {
	case err != nil:
		return err
	case peer == nil:
		return f.Local.StreamIsActive(ref, stream)
	}
	// Ended with the Local server too (Close), or GracefulStop would wait
	// for the peer.
	ctx, cancel := context.WithCancel(outgoing(stream.Context()))
	defer cancel()
	go func() {
		select {
		case <-f.Local.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	up, err := peer.StreamIsActive(ctx, ref)
	if err != nil {
		return err
	}
	md, err := up.Header()
	if err != nil {
		return err
	}
	if err := stream.SendHeader(md); err != nil {
		return err
	}
	for {
		msg, err := up.Recv()
		if errors.Is(err, io.EOF) || isClosed(f.Local.done) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
