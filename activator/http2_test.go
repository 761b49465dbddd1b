package activator

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/queueproxy/queueproxytest"
)

// A gRPC function is reached by host (a gRPC client cannot add a path
// prefix), from zero: the call waits for the instance as an HTTP/1.1
// request does; its errors are recorded as the function's failures.
func TestGRPCFromZero(t *testing.T) {
	a := newActivator(t, Config{Domain: "example.com"}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "greeter", HTTP: true, Timeout: 30 * time.Second})
	base := serveActivator(t, a)
	client := testfn.DialGRPC(t, strings.TrimPrefix(base, "http://"), grpc.WithAuthority("greeter.ns.example.com"))

	answered := make(chan error, 1)
	go func() {
		resp, err := client.UnaryCall(t.Context(), &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("hi")}})
		if err == nil && string(resp.GetPayload().GetBody()) != "hi" {
			err = status.Errorf(codes.DataLoss, "payload %q", resp.GetPayload().GetBody())
		}
		answered <- err
	}()
	eventually.True(t, "the call waiting", func() bool { return a.Waiting("ns", "greeter") == 1 })
	a.SetEndpoints("ns", "greeter", []string{queueproxytest.Start(t, func(c *queueproxy.Config) { c.UserProtocol = v1alpha1.ProtocolH2C }).Addr})
	if err := <-answered; err != nil {
		t.Fatalf("UnaryCall from zero: %v", err)
	}

	stream, err := client.StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{
		ResponseParameters: []*testgrpc.ResponseParameters{{Size: 5}, {Size: 6}},
		ResponseStatus:     &testgrpc.EchoStatus{Code: int32(codes.PermissionDenied), Message: "not yours"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{5, 6} {
		if m, err := stream.Recv(); err != nil || len(m.GetPayload().GetBody()) != size {
			t.Fatalf("streamed message = %v, %v; want %d bytes", m, err, size)
		}
	}
	if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("end of the stream = %v, want PermissionDenied", err)
	}
	eventually.True(t, "the records of both calls", func() bool {
		records, _ := a.sink.(*invocation.Ring).Recent(10)
		return len(records) == 2
	})
	records, _ := a.sink.(*invocation.Ring).Recent(10)
	for _, r := range records {
		switch {
		case r.Status == 200 && r.ColdStart && r.Error == "" && r.RequestID != "":
		case r.Status == 403 && !r.ColdStart && r.Error == "grpc-status 7 PermissionDenied: not yours":
		default:
			t.Errorf("record %+v: want a cold 200 and a 403 with the gRPC error", r)
		}
	}
}

// An HTTP/2 client is routed, answered and failed as an HTTP/1.1 one is,
// and a refused instance's request goes to another.
func TestHTTP2Requests(t *testing.T) {
	dead := net.JoinHostPort("127.0.0.1", "1") // nothing listens on port 1
	a := newActivator(t, Config{}, &countingPoker{})
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "fn", HTTP: true, Timeout: 10 * time.Second})
	a.SetEndpoints("ns", "fn", []string{dead, startInstance(t)})
	base := serveActivator(t, a)
	get := func(path string, header ...string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := h2cClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.ProtoMajor != 2 {
			t.Fatalf("GET %s: %s, %v", path, resp.Proto, err)
		}
		return resp, body
	}
	for range 20 {
		resp, body := get("/fn/ns/fn/echo?x=1", "Sless-Trigger", "forged")
		var echo testfn.Echo
		if err := json.Unmarshal(body, &echo); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s, %v", resp.StatusCode, body, err)
		}
		if echo.URI != "/echo?x=1" || echo.Headers["X-Forwarded-Prefix"][0] != "/fn/ns/fn" || echo.Headers["X-Request-Id"] == nil || echo.Headers["Sless-Trigger"] != nil {
			t.Fatalf("the function saw %s with %v", echo.URI, echo.Headers)
		}
	}
	if resp, body := get("/fn/ns/nope/"); resp.StatusCode != 404 || !strings.Contains(string(body), UnknownFunction) {
		t.Errorf("unknown function: %d %s", resp.StatusCode, body)
	}
}

// A proxy the activator trusts (by its network) tells functions the
// scheme and host its callers used, in HTTP/1.1 and HTTP/2; another
// client's claims are removed. The prefix is the platform's either way.
func TestTrustedProxies(t *testing.T) {
	instance := startInstance(t)
	var p http.Protocols
	p.SetHTTP1(true)
	h1 := &http.Client{Transport: &http.Transport{Protocols: &p}}
	for _, tt := range []struct {
		trust       string
		wantForward bool
	}{{"127.0.0.0/8", true}, {"10.0.0.0/8", false}} {
		a := newActivator(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(tt.trust)}}, &countingPoker{})
		a.SetFunction(RouteSpec{Namespace: "ns", Name: "fn", HTTP: true, Timeout: 10 * time.Second})
		a.SetEndpoints("ns", "fn", []string{instance})
		base := serveActivator(t, a)
		for proto, c := range map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2.0": h2cClient} {
			req, _ := http.NewRequest(http.MethodGet, base+"/fn/ns/fn/echo", nil)
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "api.example.test")
			req.Header.Set("X-Forwarded-Prefix", "/forged")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var echo testfn.Echo
			err = json.NewDecoder(resp.Body).Decode(&echo)
			resp.Body.Close()
			if err != nil || resp.Proto != proto {
				t.Fatalf("%s: %s, %v", proto, resp.Proto, err)
			}
			h := echo.Headers
			forwarded := slices.Equal(h["X-Forwarded-Proto"], []string{"https"}) && slices.Equal(h["X-Forwarded-Host"], []string{"api.example.test"})
			if forwarded != tt.wantForward || h["X-Forwarded-Proto"] == nil && tt.wantForward || !slices.Equal(h["X-Forwarded-Prefix"], []string{"/fn/ns/fn"}) {
				t.Errorf("trusting %s, %s: the function saw %v; want the proxy's scheme and host %v, the platform's prefix", tt.trust, proto, h, tt.wantForward)
			}
			if !tt.wantForward && (h["X-Forwarded-Proto"] != nil || h["X-Forwarded-Host"] != nil) {
				t.Errorf("trusting %s, %s: an untrusted client's claims reached the function: %v", tt.trust, proto, h)
			}
		}
	}
}
