package kedascaler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
)

// handlerCounter wraps the server to count StreamIsActive handlers that
// have not returned, so tests see handlers end, not just unsubscribe.
type handlerCounter struct {
	*Server
	running atomic.Int32
}

func (h *handlerCounter) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	h.running.Add(1)
	defer h.running.Add(-1)
	return h.Server.StreamIsActive(ref, stream)
}

// serve runs srv on a real gRPC server on loopback and returns a KEDA
// client of it. Cleanup closes srv and stops gracefully, which returns
// only once every handler has.
func serve(t *testing.T, srv *Server) (externalscaler.ExternalScalerClient, *handlerCounter) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &handlerCounter{Server: srv}
	return serveScaler(t, lis, counted, srv), counted
}

// serveScaler serves impl, in front of srv, on lis and returns a KEDA
// client of it. Cleanup closes srv (ending its streams) and stops
// gracefully.
func serveScaler(t *testing.T, lis net.Listener, impl externalscaler.ExternalScalerServer, srv *Server) externalscaler.ExternalScalerClient {
	t.Helper()
	gs := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(gs, impl)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Close()
		gs.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return externalscaler.NewExternalScalerClient(conn)
}

func newServer() *Server { return New(slog.New(slog.NewTextHandler(io.Discard, nil))) }

func ref(namespace, function string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "so", Namespace: namespace,
		ScalerMetadata: map[string]string{wire.KEDAFunction: function}}
}

// subscribed reports how many streams are subscribed to namespace/name.
func (s *Server) subscribed(namespace, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs[types.NamespacedName{Namespace: namespace, Name: name}])
}

// drained reports whether every stream of namespace/name has taken its
// pending push, so a later push cannot coalesce with it.
func (s *Server) drained(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs[types.NamespacedName{Namespace: namespace, Name: name}] {
		if len(sub.active) > 0 {
			return false
		}
	}
	return true
}

func TestGetMetricSpec(t *testing.T) {
	client, _ := serve(t, newServer())
	tests := []struct {
		name string
		ref  *externalscaler.ScaledObjectRef
		want string
	}{
		{"namespace of the ScaledObject", ref("default", "hello"), "sless-default-hello"},
		{"namespace from metadata", &externalscaler.ScaledObjectRef{Name: "so", Namespace: "keda",
			ScalerMetadata: map[string]string{wire.KEDAFunction: "hello", wire.KEDANamespace: "team-a"}}, "sless-team-a-hello"},
		{"function not reported yet", ref("default", "ghost"), "sless-default-ghost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.GetMetricSpec(t.Context(), tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.MetricSpecs) != 1 {
				t.Fatalf("got %d metric specs, want 1", len(resp.MetricSpecs))
			}
			got := resp.MetricSpecs[0]
			if got.MetricName != tt.want || got.TargetSize != 1 || got.TargetSizeFloat != 1 {
				t.Errorf("metric spec %q target %d/%g, want %q target 1", got.MetricName, got.TargetSize, got.TargetSizeFloat, tt.want)
			}
		})
	}
}

// TestValuesFollowScale checks that what KEDA reads is what the autoscaler
// last wrote, and that Scale reports the value before.
func TestValuesFollowScale(t *testing.T) {
	srv := newServer()
	client, _ := serve(t, srv)
	fn := ref("default", "hello")
	steps := []struct {
		replicas, wantHad int32
		wantActive        bool
	}{
		{replicas: 3, wantHad: 0, wantActive: true},
		{replicas: 5, wantHad: 3, wantActive: true},
		{replicas: 0, wantHad: 5, wantActive: false},
		{replicas: 2, wantHad: 0, wantActive: true},
	}
	for _, step := range steps {
		had, err := srv.Scale(t.Context(), "default", "hello", step.replicas)
		if err != nil || had != step.wantHad {
			t.Fatalf("Scale(%d) = %d, %v; want %d before", step.replicas, had, err, step.wantHad)
		}
		active, err := client.IsActive(t.Context(), fn)
		if err != nil || active.Result != step.wantActive {
			t.Errorf("after Scale(%d): IsActive = %v, %v; want %v", step.replicas, active.GetResult(), err, step.wantActive)
		}
		metrics, err := client.GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: fn, MetricName: "sless-default-hello"})
		if err != nil {
			t.Fatalf("after Scale(%d): GetMetrics: %v", step.replicas, err)
		}
		if len(metrics.MetricValues) != 1 {
			t.Fatalf("after Scale(%d): got %d metric values, want 1", step.replicas, len(metrics.MetricValues))
		}
		v := metrics.MetricValues[0]
		if v.MetricName != "sless-default-hello" || v.MetricValue != int64(step.replicas) || v.MetricValueFloat != float64(step.replicas) {
			t.Errorf("after Scale(%d): metric %q = %d/%g", step.replicas, v.MetricName, v.MetricValue, v.MetricValueFloat)
		}
	}
}

func TestErrors(t *testing.T) {
	srv := newServer()
	client, _ := serve(t, srv)
	if _, err := srv.Scale(t.Context(), "default", "gone", 1); err != nil {
		t.Fatal(err)
	}
	srv.Forget("default", "gone")
	noFunction := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "default", ScalerMetadata: map[string]string{"fn": "hello"}}
	tests := []struct {
		name string
		ref  *externalscaler.ScaledObjectRef
		code codes.Code
		msg  string // in the error message
		all  bool   // GetMetricSpec and StreamIsActive fail too
	}{
		{"no function in metadata", noFunction, codes.InvalidArgument, `no "function"`, true},
		{"no namespace anywhere", ref("", "hello"), codes.InvalidArgument, "namespace", true},
		{"invalid function name", ref("default", "Hello_World"), codes.InvalidArgument, "Hello_World", true},
		{"never reported", ref("default", "ghost"), codes.NotFound, "default/ghost", false},
		{"forgotten", ref("default", "gone"), codes.NotFound, "default/gone", false},
	}
	check := func(t *testing.T, call string, err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %s naming %q", call, err, code, msg)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.IsActive(t.Context(), tt.ref)
			check(t, "IsActive", err, tt.code, tt.msg)
			_, err = client.GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: tt.ref})
			check(t, "GetMetrics", err, tt.code, tt.msg)
			if !tt.all {
				return
			}
			_, err = client.GetMetricSpec(t.Context(), tt.ref)
			check(t, "GetMetricSpec", err, tt.code, tt.msg)
			stream, err := client.StreamIsActive(t.Context(), tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			check(t, "StreamIsActive", err, tt.code, tt.msg)
		})
	}
}

// recvAll reads a stream to its end, which must be clean (io.EOF).
func recvAll(t *testing.T, stream grpc.ServerStreamingClient[externalscaler.IsActiveResponse]) []bool {
	t.Helper()
	var got []bool
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("stream ended with %v after %v", err, got)
		}
		got = append(got, resp.Result)
	}
}

// TestStreamIsActiveEdges checks that a stream gets true on each
// inactive→active edge of its function and on nothing else. After every
// change the test waits until the stream's handler has taken any pending
// push, so no two pushes coalesce: what the stream holds when the server
// closes it is every push there was.
func TestStreamIsActiveEdges(t *testing.T) {
	srv := newServer()
	client, _ := serve(t, srv)
	ctx := t.Context()
	hello, err := client.StreamIsActive(ctx, ref("default", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.StreamIsActive(ctx, ref("default", "other"))
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "both streams are subscribed", func() bool {
		return srv.subscribed("default", "hello") == 1 && srv.subscribed("default", "other") == 1
	})
	scale := func(namespace, name string, replicas int32) {
		t.Helper()
		if _, err := srv.Scale(ctx, namespace, name, replicas); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, namespace+"/"+name+"'s pushes are taken", func() bool { return srv.drained(namespace, name) })
	}

	scale("default", "hello", 0) // unknown → 0: not an edge
	scale("default", "hello", 3)
	if resp, err := hello.Recv(); err != nil || !resp.Result {
		t.Fatalf("after 0→3: %v, %v; want true", resp, err)
	}
	scale("default", "hello", 5) // active → active: nothing
	scale("default", "other", 1) // another function's edge
	scale("team-a", "hello", 4)  // the same name in another namespace
	scale("default", "hello", 0) // turning inactive sends nothing
	scale("default", "hello", 2) // the second edge
	scale("default", "hello", 2) // unchanged: nothing

	srv.Close()
	if got := recvAll(t, hello); len(got) != 1 || !got[0] {
		t.Errorf("after the first true, default/hello's stream got %v; want exactly [true] (the 0→2 edge)", got)
	}
	if got := recvAll(t, other); len(got) != 1 || !got[0] {
		t.Errorf("default/other's stream got %v; want exactly [true]", got)
	}
}

func TestStreamEndsWhenClientCancels(t *testing.T) {
	srv := newServer()
	client, handlers := serve(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := client.StreamIsActive(ctx, ref("default", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the stream is subscribed", func() bool { return srv.subscribed("default", "hello") == 1 })
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want Canceled", err)
	}
	eventually.True(t, "the handler returns", func() bool { return handlers.running.Load() == 0 })
	if n := srv.subscribed("default", "hello"); n != 0 {
		t.Errorf("%d streams still subscribed after the handler returned", n)
	}
}

func TestStreamLimit(t *testing.T) {
	srv := newServer()
	srv.maxStreams = 2
	client, handlers := serve(t, srv)
	open := func(ctx context.Context) grpc.ServerStreamingClient[externalscaler.IsActiveResponse] {
		t.Helper()
		stream, err := client.StreamIsActive(ctx, ref("default", "hello"))
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	first, cancelFirst := context.WithCancel(t.Context())
	open(first)
	open(t.Context())
	eventually.True(t, "two streams are subscribed", func() bool { return srv.subscribed("default", "hello") == 2 })
	if _, err := open(t.Context()).Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third stream: %v, want ResourceExhausted", err)
	}
	cancelFirst()
	eventually.True(t, "the first handler returns", func() bool { return handlers.running.Load() == 1 })
	open(t.Context())
	eventually.True(t, "a stream takes the freed place", func() bool { return srv.subscribed("default", "hello") == 2 })
}

// TestKnownBeforeDecision: a function known but not decided on yet is
// answered with the replicas it has, not an error; its first decision
// then replaces them. A
// function never heard of is NotFound.
func TestKnownBeforeDecision(t *testing.T) {
	srv := newServer()
	client, _ := serve(t, srv)
	tests := []struct {
		name       string
		known      int32
		wantActive bool
	}{
		{"at zero", 0, false},
		{"running", 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := ref("default", "known-"+strings.ReplaceAll(tt.name, " ", "-"))
			name := fn.ScalerMetadata[wire.KEDAFunction]
			srv.Know("default", name, tt.known)
			active, err := client.IsActive(t.Context(), fn)
			if err != nil || active.Result != tt.wantActive {
				t.Errorf("IsActive before the first decision = %v, %v; want %v, no error", active, err, tt.wantActive)
			}
			metrics, err := client.GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: fn})
			if err != nil || metrics.MetricValues[0].MetricValue != int64(tt.known) {
				t.Errorf("GetMetrics before the first decision = %v, %v; want %d", metrics, err, tt.known)
			}
			srv.Know("default", name, 7) // known again: no change
			if had, _ := srv.Scale(t.Context(), "default", name, 2); had != tt.known {
				t.Errorf("the first decision found %d, want the known %d", had, tt.known)
			}
		})
	}
	if _, err := client.IsActive(t.Context(), ref("default", "never-heard-of")); status.Code(err) != codes.NotFound {
		t.Errorf("IsActive of a function never heard of: %v, want NotFound", err)
	}
}
