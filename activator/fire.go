package activator

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/internal/wire"
)

// fireAddr is the client address a fire's request shows.
var fireAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

// Errors of Fire, which the fire route answers 404 and 409: nothing was
// sent or recorded.
var (
	// ErrNoTrigger means the function, or its trigger, is unknown.
	ErrNoTrigger = errors.New("unknown trigger")
	// ErrNotFireable means the trigger is disabled or not a cron trigger.
	ErrNotFireable = errors.New("not an enabled cron trigger")
)

// refusal is an error of Fire: one of its kinds, said of the fire.
type refusal struct {
	kind error
	msg  string
}

func (r refusal) Error() string { return r.msg }
func (r refusal) Unwrap() error { return r.kind }

// Fire invokes a function for its cron trigger: a POST of body to / with
// the trigger's name and the scheduled time in headers, through the same
// throttling, instances, metrics and records (trigger cron) as HTTP, and
// whether or not the function has an HTTP trigger. It returns the status
// the invocation was answered with, or ErrNoTrigger or ErrNotFireable
// when the function has no enabled cron trigger of that name.
func (a *Activator) Fire(_ context.Context, namespace, name, trigger string, scheduled time.Time, body []byte) (int, error) {
	refused := func(kind error, why string) (int, error) {
		return 0, refusal{kind, "fire " + trigger + " of " + namespace + "/" + name + ": " + why}
	}
	rt := a.routes.get(namespace, name)
	if rt == nil {
		return refused(ErrNoTrigger, "unknown function")
	}
	t, ok := rt.fn.Triggers[trigger]
	switch {
	case !ok:
		return refused(ErrNoTrigger, "the function has no such trigger")
	case !t.Cron:
		return refused(ErrNotFireable, "not a cron trigger")
	case !t.Enabled:
		return refused(ErrNotFireable, "the trigger is disabled (enabled: false)")
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
	res := a.serve(ctx, rt, start.Add(rt.fn.Timeout), nil, nil)
	if res.body != nil {
		_, _ = io.Copy(io.Discard, res.body)
		_ = res.body.Close()
		res.lease.Release()
	}
	res.trigger, res.triggerName = "cron", trigger
	a.finish(ctx, rt, start, res)
	return res.code, nil
}
