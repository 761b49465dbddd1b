package queueproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

// h2cClient speaks HTTP/2 without TLS, with prior knowledge, as curl
// --http2-prior-knowledge does.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// gRPC passes the queue-proxy to a user process that speaks h2c: unary
// calls, streamed answers that arrive as they are sent, and errors,
// which count as the HTTP status of their code.
func TestGRPC(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.UserProtocol = v1alpha1.ProtocolH2C })
	grpc := testfn.DialGRPC(t, strings.TrimPrefix(h.url, "http://"))
	ctx := t.Context()

	resp, err := grpc.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("hello")}})
	if err != nil || string(resp.GetPayload().GetBody()) != "hello" {
		t.Fatalf("UnaryCall = %v, %v; want the payload back", resp, err)
	}
	_, err = grpc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.NotFound), Message: "no such thing"}})
	if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "no such thing" {
		t.Errorf("UnaryCall asking NotFound = %v, want NotFound: no such thing", err)
	}

	// The first message arrives while the call is still in flight: its
	// second comes only once the test has seen the first.
	stream, err := grpc.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{
		{Size: 3}, {Size: 70_000, IntervalUs: int32(time.Second / time.Microsecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || len(first.GetPayload().GetBody()) != 3 {
		t.Fatalf("first message = %v, %v", first, err)
	}
	if n := h.srv.inFlight(); n != 1 {
		t.Errorf("in flight while the stream is open = %d, want 1", n)
	}
	second, err := stream.Recv()
	if err != nil || len(second.GetPayload().GetBody()) != 70_000 {
		t.Fatalf("second message = %v, %v", second, err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("end of stream = %v, want EOF", err)
	}
	eventually.True(t, "the calls counted", func() bool {
		return h.counter("sless_queueproxy_requests_total", "code", "200") == 2 && h.counter("sless_queueproxy_requests_total", "code", "404") == 1
	})
}

// A client in HTTP/1.1 reaches a user process that speaks h2c only
// through the queue-proxy, and an HTTP/2 client one that speaks
// HTTP/1.1: the queue-proxy speaks each side's protocol.
func TestProtocolsMeet(t *testing.T) {
	for _, tt := range []struct {
		name   string
		user   v1alpha1.Protocol
		client *http.Client
	}{
		{"http1 to h2c", v1alpha1.ProtocolH2C, http.DefaultClient},
		{"h2c to http1", v1alpha1.ProtocolHTTP1, h2cClient()},
		{"h2c to h2c", v1alpha1.ProtocolH2C, h2cClient()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, func(c *Config) { c.UserProtocol = tt.user })
			h.client = tt.client
			body := bytes.Repeat([]byte("0123456789"), 100_000)
			req, _ := http.NewRequest(http.MethodPost, h.url+"/echo?status=201", bytes.NewReader(body))
			req.Header.Add("X-Multi", "one")
			req.Header.Add("X-Multi", "two")
			resp, got := h.do(req)
			if want := tt.client != http.DefaultClient; (resp.ProtoMajor == 2) != want {
				t.Errorf("answered in %s", resp.Proto)
			}
			var echo testfn.Echo
			if err := json.Unmarshal(got, &echo); err != nil {
				t.Fatalf("%d %q: %v", resp.StatusCode, got, err)
			}
			if resp.StatusCode != 201 || !bytes.Equal(echo.Body, body) || strings.Join(echo.Headers["X-Multi"], ",") != "one,two" {
				t.Errorf("%d, body of %d bytes, X-Multi %v; want 201, the body sent, one,two", resp.StatusCode, len(echo.Body), echo.Headers["X-Multi"])
			}
			if len(echo.Headers["X-Forwarded-For"]) != 1 {
				t.Errorf("X-Forwarded-For = %v, want the client's address", echo.Headers["X-Forwarded-For"])
			}
		})
	}
}

// A drain lets the HTTP/2 streams in flight end: the client is told to
// open no new one (GOAWAY), and its open call completes.
func TestDrainHTTP2(t *testing.T) {
	h := startProxy(t, func(c *Config) { c.UserProtocol = v1alpha1.ProtocolH2C })
	grpc := testfn.DialGRPC(t, strings.TrimPrefix(h.url, "http://"))
	stream, err := grpc.StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{
		{Size: 1}, {Size: 2, IntervalUs: int32(500 * time.Millisecond / time.Microsecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	h.cancel() // SIGTERM
	if m, err := stream.Recv(); err != nil || len(m.GetPayload().GetBody()) != 2 {
		t.Fatalf("message sent during the drain = %v, %v", m, err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("end of the stream during the drain = %v, want EOF", err)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the drain did not end")
	}
	h.done <- nil // for the harness's cleanup
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := grpc.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("a call after the drain = %v, want Unavailable", err)
	}
}

// A user process that speaks h2c alone (as a gRPC server does) is probed
// in h2c, and HTTP/1.1 clients reach it through the queue-proxy.
func TestUserSpeaksH2COnly(t *testing.T) {
	ln := listen(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" "+r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	h := startProxy(t, func(c *Config) {
		c.UserPort, _ = strconv.Atoi(port)
		c.UserProtocol = v1alpha1.ProtocolH2C
	})
	for _, client := range []*http.Client{http.DefaultClient, h2cClient()} {
		h.client = client
		if resp, body := h.get(h.url, "/hello"); resp.StatusCode != 200 || string(body) != "HTTP/2.0 /hello" {
			t.Errorf("client in %s: %d %q, want 200 from HTTP/2.0 /hello", resp.Proto, resp.StatusCode, body)
		}
	}
}
