package queueproxy

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// proxy forwards requests to the user process through a breaker, keeping
// the stats and metrics the autoscaler and Prometheus read.
type proxy struct {
	client  *upstream
	breaker *Breaker // nil when concurrency is unlimited
	stats   *Stats
	metrics *metrics
	timeout time.Duration
	maxBody int64
	errBody errorBodies
	// endStreamFn is endStream, bound once so that streaming a body does
	// not allocate a closure.
	endStreamFn func(*streamedBody)
	// refused is called when the user process refuses a connection, so
	// readiness drops at once rather than at the next probe.
	refused func()
}

// newProxy returns a proxy to the user process on 127.0.0.1:cfg.UserPort.
// refused is called whenever the user process refuses a connection.
func newProxy(cfg Config, stats *Stats, m *metrics, refused func()) *proxy {
	p := &proxy{
		// Idle connections live 4 s, below the 5 s keep-alive timeout
		// of Node's http server, so that the proxy does not reuse a
		// connection the function is closing.
		client:  newUpstream(net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.UserPort)), maxIdleConns(cfg.Concurrency), 4*time.Second, cfg.MaxBodyBytes),
		stats:   stats,
		metrics: m,
		timeout: cfg.Timeout,
		maxBody: cfg.MaxBodyBytes,
		errBody: newErrorBodies(cfg.Namespace, cfg.Function),
		refused: refused,
	}
	if cfg.Concurrency > 0 {
		p.breaker = NewBreaker(cfg.Concurrency, cfg.QueueDepth)
	}
	p.endStreamFn = p.endStream
	return p
}

// maxIdleConns bounds the idle connections kept to the user process.
func maxIdleConns(concurrency int) int {
	if concurrency > 0 {
		return concurrency
	}
	return 1024
}

// StatusClientClosedRequest is recorded for requests whose client hung up
// before the answer (nginx's 499); nobody receives it.
const StatusClientClosedRequest = 499

// ServeHTTP is the fasthttp handler of the serving port.
func (p *proxy) ServeHTTP(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	p.stats.In(start)
	code, body := p.serve(ctx, start)
	if body != nil {
		// The request ends when fasthttp has written the body and closed
		// it, in endStream.
		body.done, body.startedAt, body.code = p.endStreamFn, start, code
		return
	}
	p.end(start, code)
}

// end records a request that has left the proxy.
func (p *proxy) end(start time.Time, code int) {
	now := time.Now()
	p.stats.Out(now)
	p.metrics.observe(code, now.Sub(start))
}

func (p *proxy) endStream(b *streamedBody) {
	if b.holdsSlot {
		p.breaker.Release()
	}
	p.end(b.startedAt, b.code)
}

// serve answers the request and returns its status code, and the body
// still streaming to the client, if any, which then holds the slot.
func (p *proxy) serve(ctx *fasthttp.RequestCtx, start time.Time) (int, *streamedBody) {
	if int64(ctx.Request.Header.ContentLength()) > p.maxBody {
		return p.fail(ctx, fasthttp.StatusRequestEntityTooLarge, p.errBody.tooLarge), nil
	}
	deadline := start.Add(p.timeout)
	cc, _ := ctx.Conn().(*clientConn) // nil when hang-ups are not watched
	if p.breaker != nil {
		var gone <-chan struct{}
		if cc != nil {
			gone = cc.gone
		}
		switch err := p.breaker.Acquire(deadline, gone); err {
		case nil:
		case ErrQueueFull:
			ctx.Response.Header.Set("Retry-After", "1")
			return p.fail(ctx, fasthttp.StatusServiceUnavailable, p.errBody.queueFull), nil
		case ErrClientGone:
			return StatusClientClosedRequest, nil
		default:
			return p.fail(ctx, fasthttp.StatusGatewayTimeout, p.errBody.timeout), nil
		}
	}
	code, body := p.forward(ctx, deadline, cc)
	if body != nil {
		body.holdsSlot = p.breaker != nil
	} else if p.breaker != nil {
		p.breaker.Release()
	}
	return code, body
}

func (p *proxy) forward(ctx *fasthttp.RequestCtx, deadline time.Time, cc *clientConn) (int, *streamedBody) {
	req := &ctx.Request
	prepareRequest(req, ctx.RemoteAddr())
	resp := &ctx.Response
	body, err := p.client.do(req, resp, deadline, cc)
	if err != nil {
		resp.Reset()
		switch {
		case errors.Is(err, errClientGone):
			return StatusClientClosedRequest, nil
		case errors.Is(err, errBodyTooLarge):
			return p.fail(ctx, fasthttp.StatusRequestEntityTooLarge, p.errBody.tooLarge), nil
		case errors.Is(err, errBadBody):
			return p.fail(ctx, fasthttp.StatusBadRequest, p.errBody.badRequest), nil
		case errors.Is(err, syscall.ECONNREFUSED):
			p.refused()
		}
		return p.fail(ctx, upstreamErrorStatus(err), p.errBody.upstream(err)), nil
	}
	// The function closing its connection is no reason to close the
	// client's.
	resp.Header.ResetConnectionClose()
	stripHopByHop(&resp.Header)
	return resp.StatusCode(), body
}

// prepareRequest turns the client's request into the one for the user
// process in place: no copy, no allocation.
func prepareRequest(req *fasthttp.Request, remote net.Addr) {
	stripHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	if tcp, ok := remote.(*net.TCPAddr); ok {
		appendForwardedFor(req, tcp.AddrPort().Addr())
	}
}

// appendForwardedFor adds the client's address to X-Forwarded-For.
func appendForwardedFor(req *fasthttp.Request, ip netip.Addr) {
	var buf [256]byte
	b := buf[:0]
	if prior := req.Header.Peek("X-Forwarded-For"); len(prior) > 0 {
		if len(prior) > len(buf)-64 {
			b = make([]byte, 0, len(prior)+64)
		}
		b = append(append(b, prior...), ", "...)
	}
	b = ip.Unmap().AppendTo(b)
	req.Header.SetBytesV("X-Forwarded-For", b)
}

// upstreamErrorStatus maps a failed call to the user process to the
// status the client gets.
func upstreamErrorStatus(err error) int {
	if isTimeout(err) {
		return fasthttp.StatusGatewayTimeout
	}
	return fasthttp.StatusBadGateway
}

func (p *proxy) fail(ctx *fasthttp.RequestCtx, code int, body []byte) int {
	ctx.Response.SetStatusCode(code)
	ctx.Response.Header.SetContentType("application/json")
	ctx.Response.SetBodyRaw(body)
	return code
}

// upstreamCause names, for the 502/504 body, why the user process failed.
func upstreamCause(err error) string {
	switch {
	case isTimeout(err):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused by the function"
	case errors.Is(err, errNothingRead):
		return errNothingRead.Error()
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the function"
	}
	return err.Error()
}

// serveReadError answers a request that could not be read: too large a
// body gets 413, anything else 400.
func (p *proxy) serveReadError(ctx *fasthttp.RequestCtx, err error) {
	code, body := fasthttp.StatusBadRequest, p.errBody.badRequest
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		code, body = fasthttp.StatusRequestEntityTooLarge, p.errBody.tooLarge
	}
	p.metrics.count(code)
	p.fail(ctx, code, body)
}
