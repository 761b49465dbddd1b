package runs

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy is how a function's runs are attempted: its spec.async.
type Policy struct {
	MaxAttempts int           `json:"maxAttempts"`
	MinBackoff  time.Duration `json:"minBackoffNs"`
	MaxBackoff  time.Duration `json:"maxBackoffNs"`
	MaxAge      time.Duration `json:"maxAgeNs"`
	// Concurrency bounds the runs attempted at once.
	Concurrency int `json:"concurrency"`
	// OnSuccess and OnFailure are where a run which succeeded or failed
	// passes its answer (Link).
	OnSuccess Target `json:"onSuccess,omitzero"`
	OnFailure Target `json:"onFailure,omitzero"`
}

// Target is where an ended run's answer goes: a run of Function, in the
// run's namespace, or a message on Queue; neither when both are empty.
type Target struct {
	Function string `json:"function,omitempty"`
	Queue    string `json:"queue,omitempty"`
}

// Answer is how an attempt went, as the platform saw it.
type Answer struct {
	// Status is the answer's status: the function's, or the platform's
	// when it failed the attempt (502, 503, 504).
	Status int
	// RetryAfter is the answer's Retry-After, 0 when it had none.
	RetryAfter time.Duration
	// Failure is why the platform failed the attempt, empty when the
	// function answered.
	Failure string
}

// retryable says whether an attempt answered status may succeed if tried
// again: a server's failure, a timeout, too many requests. Any other 4xx
// is the request's own fault, the same the next time.
func retryable(status int) bool {
	return status >= 500 || status == 408 || status == 429
}

// Outcome decides what an attempt's answer makes of its run: succeeded
// for any status below 400, failed for a status no retry changes or once
// the attempts are spent, else queued again after a backoff (the
// answer's Retry-After when longer, up to MaxBackoff).
func (p Policy) Outcome(attempt int, a Answer, now time.Time) Outcome {
	o := Outcome{State: Succeeded}
	if a.Status < 400 {
		return o
	}
	o.Error = a.Failure
	if o.Error == "" {
		o.Error = fmt.Sprintf("the function answered %d", a.Status)
	}
	switch {
	case !retryable(a.Status):
		o.State = Failed
	case attempt >= p.MaxAttempts:
		o.State = Failed
		o.Error = fmt.Sprintf("%s (attempt %d of %d)", o.Error, attempt, p.MaxAttempts)
	default:
		o.State, o.RetryAt = Queued, now.Add(max(p.Backoff(attempt), min(a.RetryAfter, p.MaxBackoff)))
	}
	return o
}

// Backoff is the wait after attempt n failed: MinBackoff doubled for each
// attempt after the first, at most MaxBackoff, less up to a fifth at
// random so that runs failed together are not tried again together.
func (p Policy) Backoff(n int) time.Duration {
	d := p.MinBackoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	if d <= 0 {
		return 0
	}
	return d - rand.N(d/5+1)
}
