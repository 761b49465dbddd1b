// Package kedascaler reports the autoscaler's desired replicas to KEDA for
// functions whose replicas KEDA writes (scale.owner: keda). It serves KEDA's
// external-push scaler gRPC contract; callers register it with
// externalscaler.RegisterExternalScalerServer.
package kedascaler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"sless.dev/sless/internal/wire"
)

// MaxStreams bounds the StreamIsActive streams one server holds open (one
// per ScaledObject trigger), so a misbehaving client cannot exhaust memory
// or goroutines; beyond it streams are refused with ResourceExhausted and
// KEDA retries with backoff.
const MaxStreams = 10000

// Server is the autoscaler's KEDA external-push scaler and, for KEDA-owned
// functions, its ReplicaWriter: what the autoscaler decides is recorded
// here and read by KEDA, so that KEDA and its HPA land on the same number.
type Server struct {
	externalscaler.UnimplementedExternalScalerServer

	log        *slog.Logger
	maxStreams int
	done       chan struct{}
	closeOnce  sync.Once

	mu      sync.Mutex
	desired map[types.NamespacedName]int32
	// subs are the StreamIsActive streams per function.
	subs    map[types.NamespacedName]map[*subscriber]struct{}
	streams int
}

// New returns a server that knows no function yet.
func New(log *slog.Logger) *Server {
	return &Server{
		log:        log,
		maxStreams: MaxStreams,
		done:       make(chan struct{}),
		desired:    map[types.NamespacedName]int32{},
		subs:       map[types.NamespacedName]map[*subscriber]struct{}{},
	}
}

// Scale records the replicas the autoscaler wants for namespace/name and
// returns those recorded before (0 for a function not known). When the
// function turns active (from 0 or unknown to more than 0) it pushes true
// to the function's StreamIsActive streams, once: KEDA resets its cooldown
// on every true, so it is sent on the edge only.
func (s *Server) Scale(_ context.Context, namespace, name string, replicas int32) (int32, error) {
	fn := types.NamespacedName{Namespace: namespace, Name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	had := s.desired[fn]
	s.desired[fn] = replicas
	if had <= 0 && replicas > 0 {
		for sub := range s.subs[fn] {
			select {
			case sub.active <- struct{}{}:
			default: // a push is pending already
			}
		}
	}
	return had, nil
}

// Know records a KEDA-owned function the autoscaler has not decided on
// yet, with the replicas it has now (its minimum when it has no
// Deployment yet): KEDA gets those, a valid answer, until the first
// decision, instead of an error it would log, raise an event for and
// report in the ScaledObject's conditions. A function already reported
// keeps its decision.
func (s *Server) Know(namespace, name string, replicas int32) {
	fn := types.NamespacedName{Namespace: namespace, Name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.desired[fn]; !ok {
		s.desired[fn] = replicas
	}
}

// Forget drops a function that is deleted or no longer owned by KEDA; KEDA
// then gets NotFound for it until Scale reports it again.
func (s *Server) Forget(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.desired, types.NamespacedName{Namespace: namespace, Name: name})
}

// Close ends every StreamIsActive stream, now and later, so that
// grpc.Server.GracefulStop can return; KEDA sees a clean end and
// reconnects. Call it before GracefulStop.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// IsActive reports whether the function wants any instance. A function
// the autoscaler has never heard of (neither Known nor reported) is
// NotFound: KEDA takes it as an error and keeps the current replicas, the
// one answer that cannot scale a function it knows nothing of to zero.
func (s *Server) IsActive(_ context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	fn, err := target(ref)
	if err != nil {
		return nil, err
	}
	desired, err := s.lookup(fn)
	if err != nil {
		return nil, err
	}
	return &externalscaler.IsActiveResponse{Result: desired > 0}, nil
}

// GetMetricSpec returns the one metric, the desired replicas, with a target
// of 1 per instance, so that the HPA's ⌈value / target⌉ is the desired
// replicas. It needs no report from the autoscaler: KEDA builds the HPA
// from it and would leave the metric out on an error.
func (s *Server) GetMetricSpec(_ context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	fn, err := target(ref)
	if err != nil {
		return nil, err
	}
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{
		{MetricName: metricName(fn), TargetSize: 1, TargetSizeFloat: 1},
	}}, nil
}

// GetMetrics returns the desired replicas under the metric name of
// GetMetricSpec (KEDA asks with that name, its sN- prefix removed).
func (s *Server) GetMetrics(_ context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	fn, err := target(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	desired, err := s.lookup(fn)
	if err != nil {
		return nil, err
	}
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{
		{MetricName: metricName(fn), MetricValue: int64(desired), MetricValueFloat: float64(desired)},
	}}, nil
}

// StreamIsActive sends true each time the function turns active, and
// nothing else: not on subscribe, never false (KEDA ignores false and
// scales down through its metrics). A function not reported yet may be
// subscribed to. It returns when the client goes away or on Close.
func (s *Server) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	fn, err := target(ref)
	if err != nil {
		return err
	}
	sub, err := s.subscribe(fn)
	if err != nil {
		s.log.Warn("refused activation stream", "namespace", fn.Namespace, "function", fn.Name, "err", err)
		return err
	}
	defer s.unsubscribe(fn, sub)
	// Headers now, not with the first push: a client that waits for them
	// knows that pushes from here on reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return fmt.Errorf("activation stream of %s: %w", fn, err)
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return nil
		case <-sub.end:
			return status.Errorf(codes.Unavailable, "function %s is now scaled by another autoscaler replica: call again", fn)
		case <-sub.active:
			if err := stream.Send(&externalscaler.IsActiveResponse{Result: true}); err != nil {
				return fmt.Errorf("push activation of %s: %w", fn, err)
			}
		}
	}
}

func (s *Server) lookup(fn types.NamespacedName) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	desired, ok := s.desired[fn]
	if !ok {
		return 0, status.Errorf(codes.NotFound, "function %s is not one the autoscaler scales (not a valid Function owned by KEDA, or not seen yet)", fn)
	}
	return desired, nil
}

// subscriber is one StreamIsActive stream.
type subscriber struct {
	active chan struct{} // coalescing, capacity 1: the function turned active
	end    chan struct{} // closed: the function moved to another replica
	ended  bool
}

// EndStreams ends the activation streams of the functions this replica
// no longer scales (keep false), with Unavailable: KEDA calls again,
// through the Service, and reaches the replica that scales them now.
func (s *Server) EndStreams(keep func(namespace, name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fn, subs := range s.subs {
		if keep(fn.Namespace, fn.Name) {
			continue
		}
		for sub := range subs {
			if !sub.ended {
				sub.ended = true
				close(sub.end)
			}
		}
	}
}

func (s *Server) subscribe(fn types.NamespacedName) (*subscriber, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams >= s.maxStreams {
		return nil, status.Errorf(codes.ResourceExhausted, "%d activation streams open, the most one autoscaler serves", s.streams)
	}
	sub := &subscriber{active: make(chan struct{}, 1), end: make(chan struct{})}
	if s.subs[fn] == nil {
		s.subs[fn] = map[*subscriber]struct{}{}
	}
	s.subs[fn][sub] = struct{}{}
	s.streams++
	return sub, nil
}

func (s *Server) unsubscribe(fn types.NamespacedName, sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs[fn], sub)
	if len(s.subs[fn]) == 0 {
		delete(s.subs, fn)
	}
	s.streams--
}

// target reads the function a ScaledObject trigger names from its
// metadata. Both names must be DNS-1123 labels, as Kubernetes names are,
// which also keeps the metric name valid.
func target(ref *externalscaler.ScaledObjectRef) (types.NamespacedName, error) {
	meta := ref.GetScalerMetadata()
	fn := types.NamespacedName{Namespace: meta[wire.KEDANamespace], Name: meta[wire.KEDAFunction]}
	if fn.Name == "" {
		return types.NamespacedName{}, status.Errorf(codes.InvalidArgument,
			"trigger metadata of ScaledObject %s/%s has no %q: set it to the Function's name",
			ref.GetNamespace(), ref.GetName(), wire.KEDAFunction)
	}
	if fn.Namespace == "" {
		fn.Namespace = ref.GetNamespace()
	}
	for _, kv := range [][2]string{{wire.KEDANamespace, fn.Namespace}, {wire.KEDAFunction, fn.Name}} {
		if msgs := validation.IsDNS1123Label(kv[1]); len(msgs) > 0 {
			return types.NamespacedName{}, status.Errorf(codes.InvalidArgument, "trigger metadata %s %q: %s",
				kv[0], kv[1], strings.Join(msgs, "; "))
		}
	}
	return fn, nil
}

// metricName is the function's metric as KEDA and the HPA see it (KEDA
// prefixes it with sN-, N the trigger's index).
func metricName(fn types.NamespacedName) string {
	return "sless-" + fn.Namespace + "-" + fn.Name
}
