package forward

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestClassify(t *testing.T) {
	dial := func(err error) error { return dialError(&net.OpError{Op: "dial", Net: "tcp", Err: err}) }
	tests := []struct {
		name   string
		err    error
		code   int
		unsent bool
		client bool
	}{
		{"client hung up", ErrClientGone, StatusClientClosedRequest, false, true},
		{"chunked body over the limit", fmt.Errorf("%w: %w", ErrBodyTooLarge, fasthttp.ErrBodyTooLarge), 413, false, true},
		{"body stopped coming", bodyError(os.ErrDeadlineExceeded), 408, false, true},
		{"malformed chunk", bodyError(errors.New("cannot parse chunk size")), 400, false, true},
		{"body ended short", fmt.Errorf("%w: 3 of 10 bytes", bodyError(nil)), 400, false, true},
		{"refused at dial", dial(syscall.ECONNREFUSED), 502, true, false},
		{"unreachable at dial", dial(syscall.EHOSTUNREACH), 502, true, false},
		// The time left ran out while connecting: the request's timeout,
		// not the instance refusing.
		{"dial timed out", dial(os.ErrDeadlineExceeded), 504, false, false},
		{"out of descriptors at dial", dial(syscall.EMFILE), 503, false, false},
		{"user process refused, body intact", &unsentError{err: ErrRefused}, 502, true, false},
		{"user process refused, body sent", ErrRefused, 502, false, false},
		{"answer timed out", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), 504, false, false},
		{"closed before answering", fmt.Errorf("%w: EOF", ErrNothingRead), 502, false, false},
		{"reset", syscall.ECONNRESET, 502, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(tt.err)
			if f.Code != tt.code || f.Unsent != tt.unsent || f.ClientFault() != tt.client || f.Cause == "" {
				t.Errorf("Classify(%v) = %+v (client fault %v), want code %d, unsent %v, client fault %v",
					tt.err, f, f.ClientFault(), tt.code, tt.unsent, tt.client)
			}
		})
	}
}

func TestReadErrorStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"head too large", &fasthttp.ErrSmallBuffer{}, 431},
		{"body too large", fasthttp.ErrBodyTooLarge, 413},
		{"head too slow", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, 408},
		{"garbage", errors.New("cannot parse request line"), 400},
	}
	for _, tt := range tests {
		if got, _ := ReadErrorStatus(tt.err); got != tt.want {
			t.Errorf("%s: ReadErrorStatus = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestWriteErrorRetryAfter(t *testing.T) {
	var ctx fasthttp.RequestCtx
	resp := &ctx.Response
	resp.Header.Set("X-From-Function", "1")
	WriteError(&ctx, 503, []byte(`{}`))
	if string(resp.Header.Peek("Retry-After")) != "1" || resp.Header.Peek("X-From-Function") != nil {
		t.Errorf("503 headers %q: want Retry-After and nothing of the function's", resp.Header.String())
	}
	WriteError(&ctx, 502, []byte(`{}`))
	if resp.Header.Peek("Retry-After") != nil || resp.ConnectionClose() {
		t.Errorf("502 headers %q: want no Retry-After, the connection kept", resp.Header.String())
	}
}
