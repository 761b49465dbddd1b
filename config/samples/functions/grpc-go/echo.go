// Package function is a gRPC server as a Go function: grpc-go's Echo
// service (google.golang.org/grpc/examples/features/proto/echo), a unary
// call and a streamed answer, served by the Go runtime as an http.Handler
// in HTTP/2 without TLS, the Function's protocol h2c.
package function

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	pb "google.golang.org/grpc/examples/features/proto/echo"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Handle is the function: a gRPC server is an http.Handler (HTTP/2
// requests only).
var Handle = newServer()

func newServer() *grpc.Server {
	s := grpc.NewServer()
	pb.RegisterEchoServer(s, echo{})
	reflection.Register(s) // grpcurl lists and calls it without the .proto
	return s
}

type echo struct {
	pb.UnimplementedEchoServer
}

// UnaryEcho answers the message; an empty one is an InvalidArgument.
func (echo) UnaryEcho(_ context.Context, req *pb.EchoRequest) (*pb.EchoResponse, error) {
	if req.GetMessage() == "" {
		return nil, status.Error(codes.InvalidArgument, "say something")
	}
	return &pb.EchoResponse{Message: req.GetMessage()}, nil
}

// ServerStreamingEcho answers the message three times, 200 ms apart:
// each answer reaches the caller as it is sent.
func (echo) ServerStreamingEcho(req *pb.EchoRequest, stream pb.Echo_ServerStreamingEchoServer) error {
	for i := range 3 {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if err := stream.Send(&pb.EchoResponse{Message: fmt.Sprintf("%s %d", req.GetMessage(), i+1)}); err != nil {
			return err
		}
	}
	return nil
}
