package queueproxy

import (
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/queueproxy/consumer"
)

// maxWhyBytes bounds the part of a failed answer's body kept as the reason
// of the failure (a dead-lettered message's error header).
const maxWhyBytes = 1024

// Invoke sends a request that did not come through the serving port (a
// queue message) to the user process, through the same breaker, timeout,
// stats and metrics as those that did, and fills resp. It returns the
// status, and for a failure why: the function's answer, or the platform's
// cause, marked unsent when the request never reached the process. gone,
// when closed, gives the request up while it waits for a slot.
func (p *proxy) Invoke(req *fasthttp.Request, resp *fasthttp.Response, gone <-chan struct{}) consumer.Answer {
	start := time.Now()
	p.stats.In(start)
	ans := p.invoke(req, resp, start, gone)
	p.end(start, ans.Code)
	return ans
}

func (p *proxy) invoke(req *fasthttp.Request, resp *fasthttp.Response, start time.Time, gone <-chan struct{}) consumer.Answer {
	deadline := start.Add(p.timeout)
	if p.breaker != nil {
		switch slot, err := p.breaker.Acquire(deadline, gone); err {
		case nil:
			defer slot.Release()
		case ErrQueueFull:
			return unsent(fasthttp.StatusServiceUnavailable, "queue-proxy queue full")
		case ErrClientGone:
			return unsent(forward.StatusClientClosedRequest, "given up while waiting for a slot")
		default:
			return unsent(fasthttp.StatusGatewayTimeout, "timed out waiting for a slot")
		}
	}
	body, err := p.client.Do(req, resp, deadline, nil)
	if err != nil {
		f := forward.Classify(err)
		p.lost(f)
		if f.Unsent {
			return unsent(f.Code, f.Message())
		}
		return platform(f.Code, f.Message())
	}
	code := resp.StatusCode()
	if body != nil {
		// A streamed answer: keep what a failure's reason needs, and
		// read the rest so that the connection is reused.
		if code/100 != 2 {
			b, _ := io.ReadAll(io.LimitReader(body, maxWhyBytes))
			resp.SetBody(b)
		}
		_, _ = io.Copy(io.Discard, body)
		_ = body.Close()
	}
	if code/100 == 2 {
		return consumer.Answer{Code: code}
	}
	why := resp.Body()
	if len(why) > maxWhyBytes {
		why = why[:maxWhyBytes]
	}
	return consumer.Answer{Code: code, Reason: string(why)}
}

func platform(code int, reason string) consumer.Answer {
	return consumer.Answer{Code: code, Reason: reason, Platform: true}
}

func unsent(code int, reason string) consumer.Answer {
	return consumer.Answer{Code: code, Reason: reason, Platform: true, Unsent: true}
}
