package testfn

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// grpcService is the function's gRPC service: grpc-go's interop
// TestService, so that no generated code is ours. UnaryCall answers its
// payload, or the status it asks for; StreamingOutputCall streams the
// messages it asks for, waiting between them as asked, then the status
// it asks for; FullDuplexCall answers each message as it comes.
type grpcService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (grpcService) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := askedStatus(in.GetResponseStatus()); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: in.GetPayload()}, nil
}

func (grpcService) StreamingOutputCall(in *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	if err := sendAsked(stream, in.GetResponseParameters()); err != nil {
		return err
	}
	return askedStatus(in.GetResponseStatus())
}

func (grpcService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := sendAsked(stream, in.GetResponseParameters()); err != nil {
			return err
		}
	}
}

func sendAsked(stream interface {
	Send(*testgrpc.StreamingOutputCallResponse) error
}, params []*testgrpc.ResponseParameters) error {
	for _, p := range params {
		time.Sleep(time.Duration(p.GetIntervalUs()) * time.Microsecond)
		body := bytes.Repeat([]byte{'g'}, int(p.GetSize()))
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

func askedStatus(s *testgrpc.EchoStatus) error {
	if s == nil || s.GetCode() == 0 {
		return nil
	}
	return status.Error(codes.Code(s.GetCode()), s.GetMessage())
}

// withGRPC serves gRPC calls (HTTP/2, application/grpc) with the
// service, and the rest with h.
func withGRPC(h http.Handler) http.Handler {
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, grpcService{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// DialGRPC returns a client of the function's gRPC service at addr
// (host:port), over h2c; it is closed when the test ends.
func DialGRPC(t testing.TB, addr string, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}
