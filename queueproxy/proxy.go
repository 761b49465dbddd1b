package queueproxy

import (
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
)

// proxy forwards requests to the user process through a breaker, keeping
// the stats and metrics the autoscaler and Prometheus read.
type proxy struct {
	client  *forward.Client
	breaker *Breaker // nil when concurrency is unlimited
	stats   *Stats
	metrics *metrics
	timeout time.Duration
	maxBody int64
	errBody errorBodies
	// died is called when a call finds the user process refusing
	// connections or breaking one, so that readiness drops at once
	// rather than at the next probe.
	died func()
	// switches carries the WebSockets, closed when the drain runs out.
	switches *forward.Switches
	log      *slog.Logger
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
		timeout:  cfg.Timeout,
		maxBody:  cfg.MaxBodyBytes,
		errBody:  newErrorBodies(cfg.Namespace, cfg.Function),
		died:     died,
	}
	p.client.UserProcess = true
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
	forward.StreamUntil(ctx, start.Add(p.timeout))
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

// serveReadError answers a request that could not be read.
func (p *proxy) serveReadError(ctx *fasthttp.RequestCtx, err error) {
	code, msg := forward.ReadErrorStatus(err)
	p.metrics.count(code)
	p.fail(ctx, code, p.errBody.body(msg))
}
