package queueproxy

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Probe intervals: fast until the user process first answers, so that an
// instance is ready within milliseconds of its process, then slow.
const (
	fastProbeMin  = 10 * time.Millisecond
	fastProbeMax  = 25 * time.Millisecond
	slowProbe     = time.Second
	probeTimeout  = time.Second
	healthzTarget = "http://127.0.0.1/healthz"
)

// prober polls the user process's /healthz and keeps the result.
type prober struct {
	client *fasthttp.HostClient
	log    *slog.Logger
	ready  atomic.Bool
	// failure is why the last probe failed, for an instance that never
	// becomes ready to say why.
	failure atomic.Pointer[error]
	wake    chan struct{} // a request saw the process refuse: probe now
	first   chan struct{} // closed at the first success
	// fast, when set, replaces the random fast interval.
	fast time.Duration
}

func newProber(userPort int, log *slog.Logger) *prober {
	return &prober{
		client: &fasthttp.HostClient{
			Addr:                     net.JoinHostPort("127.0.0.1", strconv.Itoa(userPort)),
			MaxConns:                 1,
			NoDefaultUserAgentHeader: true,
		},
		log:   log,
		wake:  make(chan struct{}, 1),
		first: make(chan struct{}),
	}
}

// failed marks the process not ready and makes the prober look again at
// once, at the fast pace.
func (p *prober) failed() {
	if p.ready.Swap(false) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *prober) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-p.wake:
			timer.Stop()
		}
		err := p.probe()
		ok := err == nil
		if !ok {
			p.failure.Store(&err)
		}
		if was := p.ready.Swap(ok); was != ok {
			p.log.Info("user process readiness changed", "ready", ok)
		}
		next := slowProbe
		switch {
		case ok:
			p.firstSuccess()
		case p.fast > 0:
			next = p.fast
		default:
			next = fastProbeMin + rand.N(fastProbeMax-fastProbeMin)
		}
		timer.Reset(next)
	}
}

func (p *prober) firstSuccess() {
	select {
	case <-p.first:
	default:
		close(p.first)
	}
}

// statusError is a probe answered with a status other than 2xx.
type statusError int

func (e statusError) Error() string { return "answered " + strconv.Itoa(int(e)) }

func (p *prober) probe() error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(healthzTarget)
	req.Header.SetConnectionClose()
	if err := p.client.DoTimeout(req, resp, probeTimeout); err != nil {
		return err
	}
	if code := resp.StatusCode(); code < 200 || code >= 300 {
		return statusError(code)
	}
	return nil
}

// lastFailure says why the last failed probe failed; empty before one.
func (p *prober) lastFailure() string {
	if err := p.failure.Load(); err != nil {
		return "GET /healthz: " + (*err).Error()
	}
	return ""
}
