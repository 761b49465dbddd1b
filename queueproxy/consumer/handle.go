package consumer

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/valyala/fasthttp"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

// Headers the consumer puts on the messages it retries and dead-letters,
// for the next attempt and for whoever reads the dead-letter queue.
const (
	// AttemptsHeader counts the failed attempts so far.
	AttemptsHeader = "x-sless-attempts"
	// StatusHeader and ErrorHeader are the last attempt's status and the
	// reason it failed (at most invocation.MaxErrorBytes).
	StatusHeader = "x-sless-status"
	ErrorHeader  = "x-sless-error"
	// QueueHeader and TriggerHeader say where the message was consumed.
	QueueHeader   = "x-sless-queue"
	TriggerHeader = "x-sless-trigger"
)

// deliveryCountHeader is a quorum queue's count of a message's returns,
// set by the broker on a message it delivers again.
const deliveryCountHeader = "x-delivery-count"

// Results of a message, the result label of sless_queue_messages_total.
const (
	resultAcked        = "acked"
	resultRetried      = "retried"
	resultDeadLettered = "dead_lettered"
	resultDropped      = "dropped"
	resultRequeued     = "requeued"
	resultIsolated     = "isolated"
)

// handle invokes the function with one delivery and settles it. ctx ends
// when the instance stops.
func (c *Consumer) handle(ctx context.Context, pub *publisher, ack *acker, d amqp.Delivery) {
	if d.Redelivered {
		c.m.redelivered.Inc()
	}
	c.checkType(d)
	failed := attempts(d.Headers)
	mark, _ := d.Headers[IsolateHeader].(string)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	c.request(req, d, failed+1)
	start := time.Now()
	ans, t, alone := c.invokeSent(ctx, req, resp, c.iso.alone(mark))
	took := time.Since(start)
	c.m.duration.Observe(took.Seconds())

	result := resultAcked
	switch {
	case ans.Unsent:
		// The instance stops before the process took it: back to the
		// queue, no attempt spent.
		result = resultRequeued
	case ans.Code/100 == 2:
	case ans.crashed() && !alone:
		result = c.isolate(pub, d, c.iso.crash(t))
	case ans.crashed():
		// Alone at the process when it died: the culprit.
		c.iso.crash(t)
		if mark != "" && mark != markCrashed {
			c.iso.resolve(mark)
		}
		result = c.fail(pub, d, failed+1, ans, true)
	default:
		result = c.fail(pub, d, failed+1, ans, mark == markCrashed)
	}
	if result == resultRequeued {
		ack.Requeue(d.DeliveryTag)
	} else {
		ack.Ack(d.DeliveryTag)
	}
	c.m.count(result)
	if !ans.Unsent {
		c.record(d, start, took, ans, len(resp.Body()))
	}
}

// checkType warns, once, when a quorum trigger's queue is not one: a
// quorum queue counts the returns of a message it delivers again (not on
// its first delivery, since RabbitMQ 3.12), and no delivery limit bounds
// those of another queue.
func (c *Consumer) checkType(d amqp.Delivery) {
	if c.opts.Trigger.QueueType != v1alpha1.QueueQuorum || !d.Redelivered || d.Headers[deliveryCountHeader] != nil ||
		c.warnedType.Swap(true) {
		return
	}
	c.log.Warn("the trigger's queueType is quorum, but its queue is not a quorum queue (no x-delivery-count): a message that kills the instance each time is redelivered without bound")
}

// Waits before sending again a request the process refused.
const (
	minResend = 50 * time.Millisecond
	maxResend = 5 * time.Second
)

// stopping is the answer to a request never sent because the instance
// stopped first.
var stopping = Answer{Code: fasthttp.StatusServiceUnavailable, Reason: "the instance stopped", Platform: true, Unsent: true}

// invokeSent invokes the function with req, alone when exclusive, once
// the process is ready, until the request reaches it: a request the
// process refused (it is down, or no slot freed) is not the message's
// failure, and is sent again. It returns an unsent answer when ctx ends
// first. t is the last invocation's turn, and alone whether it had the
// process to itself.
func (c *Consumer) invokeSent(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response, exclusive bool) (ans Answer, t turn, alone bool) {
	ready := func() bool {
		select {
		case <-c.invoke.Ready():
			return true
		case <-ctx.Done():
			return false
		}
	}
	for pause := minResend; ; pause = min(2*pause, maxResend) {
		var ok bool
		t, alone, ok = c.iso.run(exclusive, ready, func() { ans = c.invoke.Invoke(req, resp, ctx.Done()) })
		if !ok {
			return stopping, t, false
		}
		if !ans.Unsent || !sleep(ctx, pause) {
			return ans, t, alone
		}
		resp.Reset()
	}
}

// sleep waits for d, and reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isolate sends d back to its queue marked with the crash it was in
// flight at, so that it runs alone when it returns; no attempt is spent.
// If that publish fails, d returns to the queue unmarked.
func (c *Consumer) isolate(pub *publisher, d amqp.Delivery, crash string) string {
	msg := copyOf(d)
	msg.Headers[IsolateHeader] = crash
	if err := pub.sendBack(msg); err != nil {
		return c.requeue(d, "isolation", err)
	}
	c.log.Info("message in flight at a crash of the function: it runs alone when it returns", "messageId", d.MessageId, "crash", crash)
	return resultIsolated
}

// request builds the invocation of delivery d, its attempt-th.
func (c *Consumer) request(req *fasthttp.Request, d amqp.Delivery, attempt int) {
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/")
	req.Header.SetHost("localhost")
	ct := d.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	req.Header.SetContentType(ct)
	req.Header.Set(wire.TriggerHeader, c.opts.Trigger.Name)
	req.Header.Set(wire.QueueHeader, c.opts.Trigger.Queue)
	req.Header.Set(wire.DeliveryCountHeader, strconv.Itoa(attempt))
	if d.MessageId != "" {
		req.Header.Set(wire.MessageIDHeader, d.MessageId)
		req.Header.Set("X-Request-Id", d.MessageId)
	}
	if d.RoutingKey != "" {
		req.Header.Set(wire.RoutingKeyHeader, d.RoutingKey)
	}
	req.SetBodyRaw(d.Body)
}

// fail settles a failed attempt: a retry after a backoff while retries
// remain, then the dead-letter queue (or, with none, a logged drop). A
// message that crashed the function is marked to run alone. The message
// is acknowledged (by the caller) only once its copy is confirmed; if
// publishing fails it returns to the queue instead.
func (c *Consumer) fail(pub *publisher, d amqp.Delivery, attempt int, ans Answer, crasher bool) string {
	t := c.opts.Trigger
	msg := failed(d, attempt, ans, t, crasher)
	switch {
	case attempt <= t.MaxRetries:
		if err := pub.retry(msg, backoff(c.opts.Backoff, attempt)); err != nil {
			return c.requeue(d, "retry", err)
		}
		return resultRetried
	case t.DeadLetterQueue != "":
		if err := pub.deadLetter(msg, t.DeadLetterQueue); err != nil {
			return c.requeue(d, "dead-letter", err)
		}
		c.log.Warn("message dead-lettered", "messageId", d.MessageId, "attempts", attempt, "status", ans.Code, "dlq", t.DeadLetterQueue)
		return resultDeadLettered
	default:
		c.log.Warn("message dropped after its retries: the trigger has no deadLetterQueue",
			"messageId", d.MessageId, "attempts", attempt, "status", ans.Code, "reason", ans.Reason)
		return resultDropped
	}
}

// requeue logs why d returns to its queue unsettled, when its copy could
// not be published: it is delivered again, without a backoff.
func (c *Consumer) requeue(d amqp.Delivery, what string, err error) string {
	c.log.Warn(what+" failed; the message returns to the queue", "messageId", d.MessageId, "err", err)
	return resultRequeued
}

// failed is the copy of d that is retried or dead-lettered: d's body and
// properties, with the attempts so far and the last failure in headers,
// and marked to run alone when it crashed the function.
func failed(d amqp.Delivery, attempt int, ans Answer, t wire.RabbitMQTrigger, crasher bool) amqp.Publishing {
	msg := copyOf(d)
	h := msg.Headers
	h[AttemptsHeader] = int32(attempt)
	h[StatusHeader] = int32(ans.Code)
	h[ErrorHeader] = invocation.TruncateError(ans.Reason)
	h[QueueHeader] = t.Queue
	h[TriggerHeader] = t.Name
	if crasher {
		h[IsolateHeader] = markCrashed
	} else {
		delete(h, IsolateHeader) // its crash's suspicion is lifted
	}
	return msg
}

// copyOf is a publishing of d's body and properties, with a copy of its
// headers to add to.
func copyOf(d amqp.Delivery) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+6)
	for k, v := range d.Headers {
		h[k] = v
	}
	delete(h, deliveryCountHeader) // the original's returns, not the copy's
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		AppId: d.AppId, Body: d.Body,
		// UserId is left out: the broker refuses one that is not the
		// publishing connection's user.
	}
}

// attempts reads how many attempts at a message have failed before.
func attempts(h amqp.Table) int {
	switch n := h[AttemptsHeader].(type) {
	case int32:
		return int(n)
	case int64:
		return int(n)
	case int16:
		return int(n)
	case int8:
		return int(n)
	case int:
		return n
	}
	return 0
}

// backoff is the wait before retrying after the attempt-th failure.
func backoff(first time.Duration, attempt int) time.Duration {
	d := first
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// record adds the invocation's record, when the consumer keeps records.
func (c *Consumer) record(d amqp.Delivery, start time.Time, took time.Duration, ans Answer, bytesOut int) {
	if c.opts.Records == nil {
		return
	}
	r := invocation.Record{
		Namespace: c.opts.Namespace, Function: c.opts.Function,
		Trigger: "rabbitmq", TriggerName: c.opts.Trigger.Name, RequestID: d.MessageId,
		Status: ans.Code, Start: start, Duration: took,
		BytesIn: len(d.Body), BytesOut: bytesOut, Instance: c.opts.Instance,
	}
	if ans.Platform {
		r.Error = invocation.TruncateError(ans.Reason)
	}
	c.opts.Records.Add(r)
}

// RetryQueues are the queues the failed messages of queue wait their
// backoffs in, from the first retry's wait.
func RetryQueues(queue string, first time.Duration, maxRetries int) []string {
	var names []string
	for a := 1; a <= maxRetries; a++ {
		if n := retryQueueName(queue, backoff(first, a)); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// retryQueueName is the queue a failed message waits its backoff in.
func retryQueueName(queue string, wait time.Duration) string {
	if wait%time.Second == 0 {
		return fmt.Sprintf("%s.retry.%ds", queue, wait/time.Second)
	}
	return fmt.Sprintf("%s.retry.%dms", queue, wait/time.Millisecond)
}
