package queueproxy

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/apis/v1alpha1"
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
	// h2c, when set, probes instead of client: a process that speaks
	// h2c may speak nothing else (a gRPC server's).
	h2c   *http.Client
	log   *slog.Logger
	ready atomic.Bool
	// failure is why the last probe failed, for an instance that never
	// becomes ready to say why.
	failure atomic.Pointer[error]
	mu      sync.Mutex
	up      chan struct{} // closed while ready; set with ready, under mu
	wake    chan struct{} // a request saw the process refuse or die: probe now
	first   chan struct{} // closed at the first success
	// fast, when set, replaces the random fast interval.
	fast time.Duration
	// down, when set, is called when a probe finds the process gone.
	down func()
}

func newProber(userPort int, protocol v1alpha1.Protocol, log *slog.Logger) *prober {
	p := &prober{
		client: &fasthttp.HostClient{
			Addr:                     net.JoinHostPort("127.0.0.1", strconv.Itoa(userPort)),
			MaxConns:                 1,
			NoDefaultUserAgentHeader: true,
		},
		log:   log,
		up:    make(chan struct{}),
		wake:  make(chan struct{}, 1),
		first: make(chan struct{}),
	}
	if protocol == v1alpha1.ProtocolH2C {
		t := &http.Transport{Protocols: new(http.Protocols)}
		t.Protocols.SetUnencryptedHTTP2(true)
		p.h2c = &http.Client{Transport: t, Timeout: probeTimeout}
	}
	return p
}

// failed marks the process not ready and makes the prober look again at
// once, at the fast pace.
func (p *prober) failed() {
	if p.set(false) {
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
		if p.set(ok) {
			p.log.Info("user process readiness changed", "ready", ok)
			if !ok && p.down != nil {
				p.down()
			}
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

// set records whether the process is ready, and reports a change.
func (p *prober) set(ok bool) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready.Load() == ok {
		return false
	}
	p.ready.Store(ok)
	if ok {
		close(p.up)
	} else {
		p.up = make(chan struct{})
	}
	return true
}

// whenReady is closed once the process is ready: at once if it is now.
func (p *prober) whenReady() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
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
	if p.h2c != nil {
		return p.probeH2C()
	}
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

func (p *prober) probeH2C() error {
	resp, err := p.h2c.Get("http://" + p.client.Addr + "/healthz")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if code := resp.StatusCode; code < 200 || code >= 300 {
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
