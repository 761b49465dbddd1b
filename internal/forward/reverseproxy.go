package forward

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// ReverseProxy carries the requests a hop took over HTTP/2 (H2C) to the
// next hop, over h2c when the next hop speaks it (a queue-proxy always
// does, a function when it said so) and HTTP/1.1 otherwise. Unlike
// Client, it is net/http's: HTTP/2 is what fasthttp does not speak, and
// httputil.ReverseProxy carries what gRPC needs (trailers, a stream each
// way, flushed as it comes).
type ReverseProxy struct {
	rp *httputil.ReverseProxy
}

// NewReverseProxy returns a proxy whose calls go through t (NewTransport).
func NewReverseProxy(t http.RoundTripper, log *slog.Logger) *ReverseProxy {
	return &ReverseProxy{rp: &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      t,
		ModifyResponse: modifyResponse,
		ErrorHandler:   func(_ http.ResponseWriter, r *http.Request, err error) { callOf(r).err = err },
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
}

// NewTransport returns the transport of a ReverseProxy: h2c, or HTTP/1.1
// keeping up to maxIdle idle connections. dial, when set, replaces the
// TCP dialer (the local platform's in-process listeners); a failed dial
// is ErrUnsent, as Client's is.
func NewTransport(h2c bool, maxIdle int, dial func(ctx context.Context, addr string) (net.Conn, error)) *http.Transport {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := dial(ctx, addr)
			if err != nil {
				return nil, dialError(err)
			}
			return c, nil
		},
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     h2cIdleTimeout / 2,
		DisableCompression:  true, // the body passes as the function wrote it
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 15 * time.Second},
	}
	if h2c {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t
}

// Outcome is how a call through a ReverseProxy went.
type Outcome struct {
	// Code is the status the client got: a gRPC error's counts as the
	// HTTP status of its code (GRPCStatus). 0 when Failed.
	Code int
	// Err says why the call is a failure: a gRPC error, a cut answer.
	Err string
	// Failed is set when the call failed before any answer: nothing was
	// written, for the hop to answer in its words, or to send the
	// request again when Failed.Unsent and Resendable.
	Failed *Failure
	// Resendable reports that nothing of the request's body was read.
	Resendable bool
	// Cut is set when the answer broke after its head was sent: the
	// hop aborts the response (AbortCut), so that the client sees the
	// stream reset rather than a clean end.
	Cut bool
}

// AbortCut aborts the response of a cut answer: net/http's one way to
// make a client see a response as broken (an HTTP/2 RST_STREAM) is the
// handler's panic with http.ErrAbortHandler, which the server recovers.
func AbortCut(o Outcome) {
	if o.Cut {
		panic(http.ErrAbortHandler)
	}
}

// Limits bound a call in time: its answer must start (its head) by
// Start and end by End, and a streamed body may not be silent for longer
// than Idle (0: End alone).
type Limits struct {
	Start, End time.Time
	Idle       time.Duration
}

// Serve sends r to the next hop at addr, within limits, and its answer
// to w.
func (p *ReverseProxy) Serve(w http.ResponseWriter, r *http.Request, addr string, limits Limits) Outcome {
	c := &call{addr: addr, idle: limits.Idle}
	// A context of its own, not r's: ReverseProxy aborts with a panic
	// when the server's is in it; the hop decides (AbortCut).
	base, cancel := context.WithCancelCause(context.WithValue(context.Background(), callKey{}, c))
	defer cancel(nil)
	ctx, stop := context.WithDeadlineCause(base, limits.End, ErrMaxDuration)
	defer stop()
	c.cancel = cancel
	c.head = time.AfterFunc(time.Until(limits.Start), func() { cancel(os.ErrDeadlineExceeded) })
	defer c.head.Stop()
	defer context.AfterFunc(r.Context(), func() { cancel(ErrClientGone) })()
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = &watchedBody{ReadCloser: r.Body, read: &c.bodyRead}
	}
	p.rp.ServeHTTP(w, out)
	if c.silence != nil {
		c.silence.Stop()
	}
	return c.outcome(context.Cause(ctx))
}

type callKey struct{}

// call is one ReverseProxy.Serve, as its hooks see it.
type call struct {
	addr     string
	resp     *http.Response
	err      error       // the call's: no answer was written
	readErr  error       // the answer's body's
	bodyRead atomic.Bool // written by the transport's goroutine
	cancel   context.CancelCauseFunc
	head     *time.Timer // cancels the call when its answer is late
	idle     time.Duration
	silence  *time.Timer // cancels the call when its body is silent for idle
}

func callOf(r *http.Request) *call { return r.Context().Value(callKey{}).(*call) }

func rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", callOf(pr.Out).addr
	pr.Out.Host = pr.In.Host
	if ap, err := netip.ParseAddrPort(pr.In.RemoteAddr); err == nil {
		ip := ap.Addr().Unmap().String()
		if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		pr.Out.Header.Set("X-Forwarded-For", ip)
	}
	// httputil removes these from every request it forwards; what reaches
	// a hop is what the activator let pass (SetForwardedHTTP).
	for _, name := range []string{ForwardedHostHeader, ForwardedProtoHeader} {
		if v := pr.In.Header[name]; v != nil {
			pr.Out.Header[name] = v
		}
	}
}

func modifyResponse(resp *http.Response) error {
	c := callOf(resp.Request)
	c.resp = resp
	if resp.Header.Get(UnsentHeader) != "" {
		return &unsentError{err: ErrRefused} // the queue-proxy's user process refused it
	}
	c.head.Stop()
	body := &watchedBody{ReadCloser: resp.Body, err: &c.readErr}
	if c.idle > 0 {
		c.silence = time.AfterFunc(time.Hour, func() { c.cancel(ErrIdleTimeout) })
		c.silence.Stop()
		body.silence, body.idle = c.silence, c.idle
	}
	resp.Body = body
	return nil
}

// outcome says how the call went; cause is why its context ended, if it
// did.
func (c *call) outcome(cause error) Outcome {
	if c.err != nil || c.resp == nil {
		f := classifyHTTP(c.err, cause)
		return Outcome{Failed: &f, Resendable: !c.bodyRead.Load()}
	}
	o := Outcome{Code: c.resp.StatusCode}
	if c.readErr != nil {
		f := classifyHTTP(c.readErr, cause)
		o.Code, o.Err, o.Cut = f.Code, "answer cut: "+f.Cause, true
		return o
	}
	if code, msg, ok := grpcError(c.resp); ok {
		o.Code, o.Err = code, msg
	}
	return o
}

// classifyHTTP maps a net/http call's error to its Failure, as Classify
// does Client's; cause, when set, is why the call's context ended (a
// limit, the client gone), which the error only echoes.
func classifyHTTP(err, cause error) Failure {
	var tooLarge *http.MaxBytesError
	switch {
	case cause != nil:
		err = cause
	case err == nil:
		err = errors.New("no answer")
	case errors.As(err, &tooLarge):
		err = ErrBodyTooLarge
	}
	return Classify(err)
}

// watchedBody notes that a request's body was read, or the error that
// ended a response's, whose silence it times (Limits.Idle) while it
// waits for the next bytes: not while the client reads what it was sent.
type watchedBody struct {
	io.ReadCloser
	read    *atomic.Bool
	err     *error
	silence *time.Timer
	idle    time.Duration
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.silence != nil {
		b.silence.Reset(b.idle)
		defer b.silence.Stop()
	}
	n, err := b.ReadCloser.Read(p)
	if b.read != nil {
		b.read.Store(true)
	}
	if b.err != nil && err != nil && err != io.EOF {
		*b.err = err
	}
	return n, err
}
