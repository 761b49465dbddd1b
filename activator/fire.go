package activator

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/wire"
)

// fireAddr is the client address a fire's request shows.
var fireAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

// Fire invokes a function for its cron trigger: a POST of body to / with
// the trigger's name and the scheduled time in headers, through the same
// throttling, instances, metrics and records (trigger cron) as HTTP, and
// whether or not the function has an HTTP trigger. It returns the status
// the invocation was answered with.
func (a *Activator) Fire(_ context.Context, namespace, name, trigger string, scheduled time.Time, body []byte) (int, error) {
	rt := a.routes.get(namespace, name)
	if rt == nil {
		return 0, fmt.Errorf("fire %s of %s/%s: unknown function", trigger, namespace, name)
	}
	start := time.Now()
	ctx := new(fasthttp.RequestCtx)
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/")
	req.Header.Set(wire.TriggerHeader, trigger)
	req.Header.Set(wire.ScheduledTimeHeader, scheduled.UTC().Format(time.RFC3339Nano))
	req.SetBody(body)
	ctx.Init(&req, fireAddr, nil)
	a.ensureRequestID(&ctx.Request)
	forward.PrepareRequest(&ctx.Request, ctx.RemoteAddr())
	res := a.serve(ctx, rt, start.Add(rt.fn.Timeout), nil)
	if res.body != nil {
		_, _ = io.Copy(io.Discard, res.body)
		_ = res.body.Close()
	}
	if res.in != nil {
		rt.throttler.Release(res.in)
	}
	res.trigger, res.triggerName = "cron", trigger
	a.finish(ctx, rt, start, res)
	return res.code, nil
}
