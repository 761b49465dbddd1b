package activator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/runs"
)

// Config is the activator's configuration.
type Config struct {
	// Domain enables host routing: <name>.<namespace>.<Domain>.
	Domain string
	// TrustedProxies are the networks of the proxies in front of the
	// activator (a load balancer, an ingress that ends TLS): their
	// X-Forwarded-Proto and X-Forwarded-Host reach functions, the scheme
	// and host their callers used. Anyone else's are removed.
	TrustedProxies []netip.Prefix
	// MaxBodyBytes bounds request bodies (413 beyond).
	MaxBodyBytes int64
	// QueueDepth bounds the requests waiting per function.
	QueueDepth int
	// MaxBuffered bounds the requests waiting across all functions.
	MaxBuffered int
	// MaxAttempts bounds the instances one request is sent to, when
	// connections are refused before anything was written.
	MaxAttempts int
	// Dial, when set, replaces the TCP dialer to instances (tests map
	// names to loopback with it).
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
}

// Defaults for the zero values of Config.
const (
	DefaultMaxBodyBytes = 10 << 20
	DefaultQueueDepth   = 1000
	DefaultMaxBuffered  = 10_000
	DefaultMaxAttempts  = 3
)

// Poker wakes the autoscaler for a function that has requests waiting and
// no instance: a push, so that scale from zero starts at once. The local
// platform calls its autoscaler in process; on Kubernetes it is a network
// call.
type Poker interface {
	Poke(namespace, name string)
}

// Activator routes invocations to functions' instances, throttling and
// buffering them. Functions and their ready instances are pushed to it
// (SetFunction, SetEndpoints) by the local platform or the Kubernetes
// watchers; it never polls.
type Activator struct {
	cfg     Config
	log     *slog.Logger
	poker   Poker
	sink    invocation.Sink
	metrics *metrics
	routes  routes
	buffer  *Buffer
	clients sync.Map // instance address → *forward.Client
	reqID   atomic.Uint64
	idBase  string

	pendingMu sync.Mutex
	pending   map[types.NamespacedName][]string // endpoints of functions not set yet

	peersMu sync.Mutex
	peers   Peers

	switches *forward.Switches // the WebSockets through it
	// h2 carries the requests that came over HTTP/2 to the instances'
	// queue-proxies, in h2c.
	h2 *forward.ReverseProxy
	// runs is set by EnableRuns, before serving; nil, runs are refused.
	runs *runner
}

// trusted reports whether a client at ip is one of the trusted proxies.
func (a *Activator) trusted(ip net.IP) bool {
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	addr = addr.Unmap()
	return slices.ContainsFunc(a.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// CloseSwitched closes the switched connections (WebSockets) still open,
// and those switched from now on: the activator's drain has run out.
func (a *Activator) CloseSwitched() { a.switches.CloseAll() }

// New returns an activator with no functions, recording invocations in
// sink and registering its metrics with reg.
func New(cfg Config, poker Poker, sink invocation.Sink, reg prometheus.Registerer, log *slog.Logger) (*Activator, error) {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	a := &Activator{
		cfg: cfg, log: log, poker: poker, sink: sink, buffer: NewBuffer(cfg.MaxBuffered),
		idBase: strconv.FormatInt(time.Now().UnixNano(), 36) + "-", switches: forward.NewSwitches(),
	}
	var dial func(context.Context, string) (net.Conn, error)
	if cfg.Dial != nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			timeout := time.Minute
			if d, ok := ctx.Deadline(); ok {
				timeout = time.Until(d)
			}
			return cfg.Dial(addr, timeout)
		}
	}
	a.h2 = forward.NewReverseProxy(forward.NewTransport(true, 0, dial), log)
	m, err := newMetrics(reg, a)
	if err != nil {
		return nil, fmt.Errorf("activator metrics: %w", err)
	}
	a.metrics = m
	return a, nil
}

// SetFunction adds a function or changes it. A change keeps the
// function's throttler, resized in place to a new concurrency, so that
// requests waiting or in flight keep their place.
func (a *Activator) SetFunction(fn RouteSpec) {
	key := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	a.routes.update(func(t *routes) {
		var rt *route
		if old := t.byPath[key]; old != nil {
			// A new route, so that requests reading the old one see a
			// consistent RouteSpec.
			rt = &route{fn: fn, throttler: old.throttler, metrics: old.metrics, prefix: old.prefix}
			if old.fn.Concurrency != fn.Concurrency {
				rt.throttler.SetCapacity(fn.Concurrency)
			}
		} else {
			poke := func() { a.poker.Poke(fn.Namespace, fn.Name) }
			rt = &route{fn: fn, throttler: NewThrottler(fn.Concurrency, a.cfg.QueueDepth, a.buffer, poke),
				metrics: a.metrics.forFunction(fn.Namespace, fn.Name), prefix: "/fn/" + fn.Namespace + "/" + fn.Name}
			a.peersMu.Lock()
			rt.throttler.SetPeers(a.peers)
			a.peersMu.Unlock()
		}
		t.byPath[key] = rt
		t.byHost[fn.Name+"."+fn.Namespace] = rt
	})
	a.pendingMu.Lock()
	addrs, ok := a.pending[key]
	delete(a.pending, key)
	a.pendingMu.Unlock()
	if ok {
		a.SetEndpoints(fn.Namespace, fn.Name, addrs)
	}
}

// RemoveFunction forgets a function. Requests waiting for it are answered
// 404 at once, as requests for it from now on are: no instance of it will
// come to serve them.
func (a *Activator) RemoveFunction(namespace, name string) {
	var rt *route
	key := types.NamespacedName{Namespace: namespace, Name: name}
	a.routes.update(func(t *routes) {
		rt = t.byPath[key]
		delete(t.byPath, key)
		delete(t.byHost, name+"."+namespace)
	})
	if rt != nil {
		a.closeClients(rt.throttler.Close())
	}
}

// SetUnavailable makes a function with no ready instance answer 503 at
// once with cause, a one-line reason (its build failed, its instances
// crash before becoming ready), instead of holding requests until their
// timeout; waiting requests get it too. An empty cause lifts it. It
// changes nothing for a function not set.
func (a *Activator) SetUnavailable(namespace, name, cause string) {
	rt := a.routes.get(namespace, name)
	if rt == nil {
		return
	}
	var err error
	if cause != "" {
		err = errors.New(cause)
	}
	rt.throttler.SetUnavailable(err)
}

// SetEndpoints sets the ready instances of a function: the addresses of
// their queue-proxies. Waiting requests are forwarded at once. Endpoints
// of a function not set yet are kept until it is (watches race).
func (a *Activator) SetEndpoints(namespace, name string, addrs []string) {
	a.pendingMu.Lock() // with SetFunction's, so that no update falls between
	rt := a.routes.get(namespace, name)
	if rt == nil {
		if a.pending == nil {
			a.pending = map[types.NamespacedName][]string{}
		}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		if len(addrs) == 0 {
			delete(a.pending, key)
		} else {
			a.pending[key] = addrs
		}
		a.pendingMu.Unlock()
		return
	}
	a.pendingMu.Unlock()
	a.closeClients(rt.throttler.Update(addrs))
}

// SetPeers tells the activator the activators in front of the same
// instances (on Kubernetes, the ready endpoints of its own Service), so
// that each admits only its share of every instance's concurrency (see
// share) and together they never send an instance more than it takes.
// Without it, or with one activator, it admits all of it.
func (a *Activator) SetPeers(p Peers) {
	a.peersMu.Lock()
	a.peers = p
	a.peersMu.Unlock()
	for _, rt := range a.routes.all() {
		a.closeClients(rt.throttler.SetPeers(p))
	}
}

// closeClients closes the connections to instances that are gone, and
// forgets their clients.
func (a *Activator) closeClients(addrs []string) {
	for _, addr := range addrs {
		if c, ok := a.clients.LoadAndDelete(addr); ok {
			c.(*forward.Client).Close()
		}
	}
}

// CloseStaleConns closes the connections to instances idle for longer than
// the instances keep them; the activator's server calls it periodically.
func (a *Activator) CloseStaleConns() {
	a.clients.Range(func(_, c any) bool {
		c.(*forward.Client).CloseStale()
		return true
	})
}

// FunctionState is a function as the activator serves it.
type FunctionState struct {
	RouteSpec
	Instances int `json:"instances"`
	// InFlight counts the requests at the instances.
	InFlight int `json:"inFlight"`
	Waiting  int `json:"waiting"`
}

// Functions lists the functions served, sorted by namespace and name.
func (a *Activator) Functions() []FunctionState {
	rts := a.routes.all()
	out := make([]FunctionState, 0, len(rts))
	for _, rt := range rts {
		instances, inFlight := rt.throttler.Load()
		out = append(out, FunctionState{RouteSpec: rt.fn, Instances: instances, InFlight: inFlight, Waiting: rt.throttler.Waiting()})
	}
	slices.SortFunc(out, func(x, y FunctionState) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	return out
}

// Buffered is the number of requests waiting for an instance, per function
// with any waiting, for the autoscaler.
func (a *Activator) Buffered() map[types.NamespacedName]int {
	out := map[types.NamespacedName]int{}
	for _, rt := range a.routes.all() {
		if n := rt.throttler.Waiting(); n > 0 {
			out[types.NamespacedName{Namespace: rt.fn.Namespace, Name: rt.fn.Name}] = n
		}
	}
	return out
}

// Waiting counts a function's requests waiting for an instance with room.
func (a *Activator) Waiting(namespace, name string) int {
	if rt := a.routes.get(namespace, name); rt != nil {
		return rt.throttler.Waiting()
	}
	return 0
}

// UnknownFunction is the error of the 404 answered for a path or host that
// names no function served.
const UnknownFunction = "unknown function"

// ServeHTTP is the fasthttp handler of the invocation port.
func (a *Activator) ServeHTTP(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	rt, rest, ok := a.routes.match(ctx.Request.Header.RequestURI(), ctx.Host(), a.cfg.Domain)
	if !ok && bytes.HasPrefix(ctx.Request.Header.RequestURI(), []byte(runs.Path)) {
		a.serveRuns(ctx)
		return
	}
	if !ok || rt == nil || !rt.fn.HTTP {
		msg := UnknownFunction
		if rt != nil && rt.fn.DisabledHTTP != "" {
			msg = "trigger " + rt.fn.DisabledHTTP + " of " + rt.fn.Namespace + "/" + rt.fn.Name + " is disabled (enabled: false)"
		}
		a.fail(ctx, fasthttp.StatusNotFound, msg, rt)
		return
	}
	if forward.TooManyFields(&ctx.Request.Header) {
		var res result
		a.failed(ctx, rt, &res, fasthttp.StatusRequestHeaderFieldsTooLarge, forward.ErrTooManyFields.Error())
		a.finish(ctx, rt, start, res)
		return
	}
	bytesIn := ctx.Request.Header.ContentLength()
	if int64(bytesIn) > a.cfg.MaxBodyBytes {
		var res result
		a.failed(ctx, rt, &res, fasthttp.StatusRequestEntityTooLarge, forward.ErrBodyTooLarge.Error())
		a.finish(ctx, rt, start, res)
		return
	}
	req := &ctx.Request
	prefix := ""
	if bytes.HasPrefix(req.Header.RequestURI(), []byte("/fn/")) {
		prefix = rt.prefix // routed by path, not by host
	}
	if rest != nil {
		req.SetRequestURIBytes(rest)
	}
	// Only the platform sets its headers (a trigger's, a message's id,
	// where the request came in): a client's could pass for them.
	forward.StripReserved(&req.Header)
	forward.SetForwarded(&req.Header, prefix, len(a.cfg.TrustedProxies) > 0 && a.trusted(ctx.RemoteIP()))
	a.ensureRequestID(req)
	if forward.PrepareRequest(req, ctx.RemoteAddr()) == forward.UpgradeUnsupported {
		var res result
		a.failed(ctx, rt, &res, forward.StatusUpgradeUnsupported, forward.UpgradeRefusal(&req.Header))
		a.finish(ctx, rt, start, res)
		return
	}
	deadline := start.Add(rt.fn.Timeout)
	cc, _ := ctx.Conn().(*forward.Conn)
	if wantsAsync(&req.Header) {
		a.submit(ctx, rt, start, cc)
		return
	}
	held, err := forward.HoldBody(req, cc, deadline)
	if err != nil {
		f := forward.Classify(err)
		var res result
		a.failed(ctx, rt, &res, f.Code, f.Message())
		a.finish(ctx, rt, start, res)
		return
	}
	var gone <-chan struct{}
	if cc != nil {
		gone = cc.Gone()
	}
	res := a.serve(ctx, rt, deadline, cc, gone)
	forward.ReleaseBody(req, held)
	if res.body == nil {
		a.finish(ctx, rt, start, res)
		return
	}
	if res.body.Switched() {
		// A WebSocket holds its instance's slot until it closes; its
		// record is the 101 and the connection's life.
		if err := a.switches.Carry(ctx, res.body); err != nil {
			a.log.Debug("switched connection ended", "err", err)
		}
		res.lease.Release()
		a.finish(ctx, rt, start, res)
		return
	}
	// A streamed body ends the request when fasthttp closes it: the one
	// closure of a response over 64 KiB.
	end := start.Add(max(rt.fn.MaxDuration, rt.fn.Timeout))
	res.body.Bound(end, rt.fn.IdleTimeout)
	forward.StreamUntil(ctx, end)
	res.body.OnClose = func() {
		res.lease.Release()
		if f, cut := res.body.Cut(); cut {
			res.code, res.err = f.Code, "answer cut: "+f.Cause
		}
		a.finish(ctx, rt, start, res)
	}
}

// result is how a request went.
type result struct {
	code int
	body *forward.Body // the response body still streaming, if any
	// lease is the instance's slot, held while body streams: whoever
	// reads body to its end releases it.
	lease Lease
	cold  bool          // waited for a function with no instance
	wait  time.Duration // how long it waited for an instance
	// instance is the address of the instance it was sent to, if any.
	instance string
	err      string // why the platform failed it
	// trigger and triggerName say what invoked, when not HTTP.
	trigger, triggerName string
}

// finish records a request that has ended.
func (a *Activator) finish(ctx *fasthttp.RequestCtx, rt *route, start time.Time, res result) {
	a.record(rt, start, res, bodySize(ctx.Request.Header.ContentLength()), max(ctx.Response.Header.ContentLength(), -1),
		string(ctx.Request.Header.Peek("X-Request-Id")))
}

// record records a request that has ended, with the sizes of its bodies
// (-1: not counted) and its id.
func (a *Activator) record(rt *route, start time.Time, res result, bytesIn, bytesOut int, requestID string) {
	d := time.Since(start)
	rt.metrics.observe(res.code, d, res.cold)
	var coldWait time.Duration
	if res.cold {
		coldWait = res.wait
	}
	a.sink.Add(invocation.Record{
		Namespace: rt.fn.Namespace, Function: rt.fn.Name, Trigger: cmp.Or(res.trigger, "http"), TriggerName: res.triggerName, Status: res.code,
		Start: start, Duration: d, QueueWait: res.wait, ColdStart: res.cold, ColdStartWait: coldWait,
		BytesIn: bytesIn, BytesOut: bytesOut, RequestID: requestID, Instance: res.instance,
		Error: invocation.TruncateError(res.err),
	})
}

// bodySize is a request body's size for its record, from fasthttp's
// Content-Length: -1 (chunked, not counted) stays; a request without
// Content-Length (-2) has no body.
func bodySize(contentLength int) int {
	if contentLength == -2 {
		return 0
	}
	return contentLength
}

// serve sends the request to an instance, and to another when one
// refuses it untouched (forward.ErrUnsent), within the deadline and
// MaxAttempts. It gives the instance's slot back before it returns,
// unless the response body still streams (res.body, res.lease). It stops
// waiting for an instance when gone closes (the client left): 499.
func (a *Activator) serve(ctx *fasthttp.RequestCtx, rt *route, deadline time.Time, cc *forward.Conn, gone <-chan struct{}) result {
	var res result
	for attempt := 1; ; attempt++ {
		lease, cold, wait, err := a.acquire(rt, deadline, gone)
		res.wait += wait
		res.cold = res.cold || cold
		if err != nil {
			if code, msg := noSlot(rt, err); code != forward.StatusClientClosedRequest {
				a.failed(ctx, rt, &res, code, msg)
			} else {
				res.code = code
			}
			return res
		}
		res.instance = lease.Addr()
		body, err := a.client(lease.Addr()).Do(&ctx.Request, &ctx.Response, deadline, cc)
		if err == nil {
			forward.PrepareResponse(&ctx.Response)
			res.code = ctx.Response.StatusCode()
			if body == nil {
				lease.Release()
			} else {
				res.body, res.lease = body, lease
			}
			return res
		}
		f := forward.Classify(err)
		if f.Unsent {
			lease.Refused()
		} else {
			lease.Release()
		}
		if f.Unsent && attempt < a.cfg.MaxAttempts && time.Now().Before(deadline) {
			ctx.Response.Reset()
			continue // nothing reached that instance: another may take it
		}
		if f.Code == forward.StatusClientClosedRequest {
			res.code = f.Code
			return res
		}
		a.failed(ctx, rt, &res, f.Code, f.Message())
		return res
	}
}

// noSlot is the answer to a request that got no instance's slot: its
// status and why (499 when the client left: nobody gets it).
func noSlot(rt *route, err error) (int, string) {
	switch {
	case errors.Is(err, ErrBufferFull):
		rt.metrics.reject(reasonBufferFull)
		return fasthttp.StatusServiceUnavailable, "too many requests waiting for the function"
	case errors.Is(err, ErrUnavailable):
		rt.metrics.reject(reasonUnavailable)
		return fasthttp.StatusServiceUnavailable, err.Error()
	case errors.Is(err, ErrRemoved):
		return fasthttp.StatusNotFound, "function " + rt.fn.Namespace + "/" + rt.fn.Name + " was removed"
	case errors.Is(err, ErrTimeout):
		rt.metrics.reject(reasonTimeout)
		return fasthttp.StatusGatewayTimeout, "timed out waiting for an instance"
	}
	return forward.StatusClientClosedRequest, ""
}

// acquire takes a slot of an instance, waiting (with a timer and a clock
// only then) until the deadline. cold reports a wait for a function with
// no instance; wait is how long it waited.
func (a *Activator) acquire(rt *route, deadline time.Time, gone <-chan struct{}) (l Lease, cold bool, wait time.Duration, err error) {
	if l, ok := rt.throttler.TryAcquire(); ok {
		return l, false, 0, nil
	}
	start := time.Now()
	d := deadline.Sub(start)
	if d <= 0 {
		return Lease{}, false, 0, ErrTimeout
	}
	t := time.NewTimer(d)
	defer t.Stop()
	l, cold, err = rt.throttler.Acquire(t.C, gone)
	return l, cold, time.Since(start), err
}

// upstreamIdleTimeout is how long a connection to an instance is kept
// idle: below the queue-proxy's 90 s, so that the activator never reuses
// one the queue-proxy is closing.
const upstreamIdleTimeout = 30 * time.Second

func (a *Activator) client(addr string) *forward.Client {
	if c, ok := a.clients.Load(addr); ok {
		return c.(*forward.Client)
	}
	c := forward.NewClient(addr, 256, upstreamIdleTimeout, a.cfg.MaxBodyBytes)
	if a.cfg.Dial != nil {
		c.Dial = a.cfg.Dial
	}
	actual, _ := a.clients.LoadOrStore(addr, c)
	return actual.(*forward.Client)
}

// ensureRequestID gives the request an X-Request-Id when it has none, so
// that the function and the records can be matched.
func (a *Activator) ensureRequestID(req *fasthttp.Request) {
	if len(req.Header.Peek("X-Request-Id")) > 0 {
		return
	}
	var buf [48]byte
	req.Header.SetBytesV("X-Request-Id", a.appendRequestID(buf[:0]))
}

// appendRequestID appends a new request id to b.
func (a *Activator) appendRequestID(b []byte) []byte {
	return strconv.AppendUint(append(b, a.idBase...), a.reqID.Add(1), 36)
}

// failed answers a request the platform fails, and notes why in res.
func (a *Activator) failed(ctx *fasthttp.RequestCtx, rt *route, res *result, code int, msg string) {
	res.code, res.err = a.fail(ctx, code, msg, rt), msg
}

func (a *Activator) fail(ctx *fasthttp.RequestCtx, code int, msg string, rt *route) int {
	forward.WriteError(ctx, code, errorBody(rt, msg, string(ctx.Path())))
	return code
}

// errorBody is the JSON body of the platform's answer to a failed
// request: why, and the function it was for, or its path when none.
func errorBody(rt *route, msg, path string) []byte {
	body := map[string]string{"error": msg}
	if rt != nil {
		body["namespace"], body["function"] = rt.fn.Namespace, rt.fn.Name
	} else {
		body["path"] = path
	}
	b, _ := json.Marshal(body)
	return b
}
