//go:build e2e

package e2e

import (
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	echopb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/status"
)

// A gRPC function (the grpc-go sample, protocol h2c) is called at zero
// through the activator, by host as gRPC clients must: the call waits for
// the first instance; a unary call, its error and a streamed answer pass
// both hops.
func TestGRPCFromZero(t *testing.T) {
	ns := namespace(t, "e2e-grpc")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "echo", "go", "grpc-go", "Handle",
		"  protocol: h2c\n  scale: {initial: 0, max: 1, window: 6s, scaleToZeroGracePeriod: 0s}\n"))
	waitFor(t, "the function created at zero", func() bool {
		return function(t, ns, "echo").Status.ObservedGeneration > 0 && len(pods(t, ns, "echo")) == 0
	})
	mustInvokeKnown(t, ns, "echo", "/healthz") // the activators know it; it starts
	waitFor(t, "back at zero", func() bool { return len(pods(t, ns, "echo")) == 0 })

	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(cluster.activator, "http://")+":80",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("echo."+ns+".sless.internal"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	echo := echopb.NewEchoClient(conn)
	ctx := t.Context()
	if resp, err := echo.UnaryEcho(ctx, &echopb.EchoRequest{Message: "from zero"}); err != nil || resp.GetMessage() != "from zero" {
		t.Fatalf("UnaryEcho from zero = %v, %v", resp, err)
	}
	if _, err := echo.UnaryEcho(ctx, &echopb.EchoRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("UnaryEcho() = %v, want InvalidArgument", err)
	}
	stream, err := echo.ServerStreamingEcho(ctx, &echopb.EchoRequest{Message: "hey"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream after %q: %v", got, err)
		}
		got = append(got, m.GetMessage())
	}
	if want := []string{"hey 1", "hey 2", "hey 3"}; !slices.Equal(got, want) {
		t.Errorf("streamed %q, want %q", got, want)
	}
}
