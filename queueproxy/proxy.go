package queueproxy

import (
	"cmp"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/forward"
)

// proxy forwards requests to the user process through a breaker, keeping
// the stats and metrics the autoscaler and Prometheus read.
type proxy struct {
	client  *forward.Client
	breaker *Breaker // nil when concurrency is unlimited
	stats   *Stats
	metrics *metrics
	// timeout bounds the wait for an answer's start, idle the silence in
	// a streamed one, maxDuration a request whole.
	timeout, idle, maxDuration time.Duration
	maxBody                    int64
	errBody                    errorBodies
	// died is called when a call finds the user process refusing
	// connections or breaking one, so that readiness drops at once
	// rather than at the next probe.
	died func()
	// switches carries the WebSockets, closed when the drain runs out.
	switches *forward.Switches
	// h2 carries the requests that came over HTTP/2, and all of them
	// when the user process speaks h2c (fromHTTP1 adapts those that
	// came over HTTP/1.1).
	h2        *forward.ReverseProxy
	userH2C   bool
	fromHTTP1 fasthttp.RequestHandler
	log       *slog.Logger
}

// newProxy returns a proxy to the user process on 127.0.0.1:cfg.UserPort.
// died is called whenever the user process refuses a connection or breaks
// one.
func newProxy(cfg Config, stats *Stats, m *metrics, died func(), log *slog.Logger) *proxy {
	p := &proxy{
		switches: forward.NewSwitches(),
		log:      log,
		client:   forward.NewClient(net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.UserPort)), maxIdleConns(cfg.Concurrency), userIdleTimeout, cfg.MaxBodyBytes),
		stats:    stats,
		metrics:  m,
		timeout:  cfg.Timeout, idle: cfg.IdleTimeout, maxDuration: max(cfg.MaxDuration, cfg.Timeout),
		maxBody: cfg.MaxBodyBytes,
		errBody: newErrorBodies(cfg.Namespace, cfg.Function),
		died:    died,
	}
	p.client.UserProcess = true
	p.userH2C = cfg.UserProtocol == v1alpha1.ProtocolH2C
	p.h2 = forward.NewReverseProxy(forward.NewTransport(p.userH2C, maxIdleConns(cfg.Concurrency), nil), log)
	p.fromHTTP1 = fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(p.ServeHTTP2))
	if cfg.Concurrency > 0 {
		p.breaker = NewBreaker(cfg.Concurrency, cfg.QueueDepth)
	}
	return p
}

// userIdleTimeout is how long a connection to the user process is kept
// idle: below the 5 s keep-alive timeout of Node's http server, so that
// the proxy does not reuse a connection the function is closing.
const userIdleTimeout = 4 * time.Second

// maxIdleConns bounds the idle connections kept to the user process.
func maxIdleConns(concurrency int) int {
	if concurrency > 0 {
		return concurrency
	}
	return 1024
}

// ServeHTTP is the fasthttp handler of the serving port.
func (p *proxy) ServeHTTP(ctx *fasthttp.RequestCtx) {
	if p.userH2C {
		p.fromHTTP1(ctx)
		return
	}
	start := time.Now()
	p.stats.In(start)
	code, body, slot := p.serve(ctx, start)
	if body == nil {
		p.end(start, code)
		return
	}
	if body.Switched() {
		// A WebSocket holds its slot, and counts in flight, until it
		// closes: the instance is not scaled away from under it.
		if err := p.switches.Carry(ctx, body); err != nil {
			p.log.Debug("switched connection ended", "err", err)
		}
		slot.Release()
		p.end(start, code)
		return
	}
	// The request ends when fasthttp has written the streamed body and
	// closed it. The closure is the one allocation of a streamed (over
	// 64 KiB) response.
	end := start.Add(p.maxDuration)
	body.Bound(end, p.idle)
	forward.StreamUntil(ctx, end)
	body.OnClose = func() {
		slot.Release()
		if f, cut := body.Cut(); cut {
			code = f.Code // counted as the failure that cut the answer, not the head's status
		}
		p.end(start, code)
	}
}

// end records a request that has left the proxy.
func (p *proxy) end(start time.Time, code int) {
	now := time.Now()
	p.stats.Out(now)
	p.metrics.observe(code, now.Sub(start))
}

// serve answers the request and returns its status code, and the body
// still streaming to the client, if any, with the slot it holds: whoever
// reads the body to its end releases it. Without a body, the slot is
// released already.
func (p *proxy) serve(ctx *fasthttp.RequestCtx, start time.Time) (int, *forward.Body, Slot) {
	if int64(ctx.Request.Header.ContentLength()) > p.maxBody {
		return p.fail(ctx, fasthttp.StatusRequestEntityTooLarge, p.errBody.tooLarge), nil, Slot{}
	}
	if forward.PrepareRequest(&ctx.Request, ctx.RemoteAddr()) == forward.UpgradeUnsupported {
		return p.fail(ctx, forward.StatusUpgradeUnsupported, p.errBody.body(forward.UpgradeRefusal(&ctx.Request.Header))), nil, Slot{}
	}
	deadline := start.Add(p.timeout)
	cc, _ := ctx.Conn().(*forward.Conn) // nil when hang-ups are not watched
	var slot Slot
	if p.breaker != nil {
		var gone <-chan struct{}
		if cc != nil {
			gone = cc.Gone()
		}
		var err error
		switch slot, err = p.breaker.Acquire(deadline, gone); err {
		case nil:
		case ErrQueueFull:
			return p.fail(ctx, fasthttp.StatusServiceUnavailable, p.errBody.queueFull), nil, Slot{}
		case ErrClientGone:
			return forward.StatusClientClosedRequest, nil, Slot{}
		default:
			return p.fail(ctx, fasthttp.StatusGatewayTimeout, p.errBody.timeout), nil, Slot{}
		}
	}
	code, body := p.pass(ctx, deadline, cc)
	if body == nil {
		slot.Release()
		return code, nil, Slot{}
	}
	return code, body, slot
}

// pass sends the request on to the user process.
func (p *proxy) pass(ctx *fasthttp.RequestCtx, deadline time.Time, cc *forward.Conn) (int, *forward.Body) {
	resp := &ctx.Response
	body, err := p.client.Do(&ctx.Request, resp, deadline, cc)
	if err == nil {
		forward.PrepareResponse(resp)
		return resp.StatusCode(), body
	}
	f := forward.Classify(err)
	if f.Code == forward.StatusClientClosedRequest {
		return f.Code, nil
	}
	code := p.fail(ctx, f.Code, p.errBody.failure(f))
	p.lost(f)
	if f.Unsent {
		// The user process took nothing: the activator sends the
		// request to another instance.
		resp.Header.Set(forward.UnsentHeader, "1")
	}
	return code, nil
}

// lost handles a call to the user process that failed. A refusal or a
// broken connection means the process died (or is dying): readiness drops
// until a probe finds it answering again, and the idle connections died
// with it: they are closed, since a request sent on one would fail as if
// the new process had crashed under it.
func (p *proxy) lost(f forward.Failure) {
	if f.Unsent || f.Code == fasthttp.StatusBadGateway {
		p.died()
		p.client.CloseIdle()
	}
}

func (p *proxy) fail(ctx *fasthttp.RequestCtx, code int, body []byte) int {
	forward.WriteError(ctx, code, body)
	return code
}

// ServeHTTP2 is the handler of the requests that came over HTTP/2 (and
// of all when the user process speaks h2c): the same breaker, timeout,
// stats and metrics as ServeHTTP's.
func (p *proxy) ServeHTTP2(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p.stats.In(start)
	out := p.serveHTTP2(w, r, start)
	p.end(start, out.Code)
	forward.AbortCut(out)
}

func (p *proxy) serveHTTP2(w http.ResponseWriter, r *http.Request, start time.Time) forward.Outcome {
	if r.ContentLength > p.maxBody {
		return p.failHTTP2(w, http.StatusRequestEntityTooLarge, p.errBody.tooLarge)
	}
	r.Body = http.MaxBytesReader(w, r.Body, p.maxBody)
	deadline := start.Add(p.timeout)
	if p.breaker != nil {
		slot, err := p.breaker.Acquire(deadline, r.Context().Done())
		switch err {
		case nil:
			defer slot.Release()
		case ErrQueueFull:
			return p.failHTTP2(w, http.StatusServiceUnavailable, p.errBody.queueFull)
		case ErrClientGone:
			return forward.Outcome{Code: forward.StatusClientClosedRequest}
		default:
			return p.failHTTP2(w, http.StatusGatewayTimeout, p.errBody.timeout)
		}
	}
	out := p.h2.Serve(w, r, p.client.Addr(), forward.Limits{Start: deadline, End: start.Add(p.maxDuration), Idle: p.idle})
	f := out.Failed
	if f == nil || f.Code == forward.StatusClientClosedRequest {
		return forward.Outcome{Code: cmp.Or(out.Code, forward.StatusClientClosedRequest), Err: out.Err, Cut: out.Cut}
	}
	p.lost(*f)
	if f.Unsent {
		w.Header().Set(forward.UnsentHeader, "1") // as pass says
	}
	return p.failHTTP2(w, f.Code, p.errBody.failure(*f))
}

func (p *proxy) failHTTP2(w http.ResponseWriter, code int, body []byte) forward.Outcome {
	forward.WriteHTTPError(w, code, body)
	return forward.Outcome{Code: code}
}

// serveReadError answers a request that could not be read.
func (p *proxy) serveReadError(ctx *fasthttp.RequestCtx, err error) {
	code, msg := forward.ReadErrorStatus(err)
	p.metrics.count(code)
	p.fail(ctx, code, p.errBody.body(msg))
}
