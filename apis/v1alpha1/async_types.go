package v1alpha1

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Async bounds a function's runs: requests sent with Prefer:
// respond-async, answered 202 once stored, attempted at least once and
// kept with their result (docs/runs.md). The backoff before an attempt
// after the first is minBackoff doubled each time, with jitter, up to
// maxBackoff, or the function's Retry-After when it says more.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minBackoff) || !has(self.maxBackoff) || duration(self.minBackoff) <= duration(self.maxBackoff)",message="minBackoff must not exceed maxBackoff",fieldPath=".minBackoff"
type Async struct {
	// MaxAttempts bounds a run's attempts. A run is attempted again when
	// an attempt fails in a way another may not: a 5xx, 408 or 429
	// answer, a timeout, an instance lost; any other 4xx fails it at
	// once.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// MinBackoff is the wait before the second attempt.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="minBackoff must be between 0s and 1h"
	MinBackoff *metav1.Duration `json:"minBackoff,omitempty"`

	// MaxBackoff bounds the wait between two attempts.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="maxBackoff must be between 0s and 1h"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`

	// MaxAge bounds how long a run may wait, queued: past it, it ends
	// expired. At most a day, well within the runs' retention.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="maxAge must be between 1s and 24h"
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// Concurrency bounds how many of the function's runs each activator
	// attempts at once; they share each instance's concurrency with its
	// other requests.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency int32 `json:"concurrency,omitempty"`

	// OnSuccess is where a run's answer goes once the run succeeded.
	// +optional
	OnSuccess *RunTarget `json:"onSuccess,omitempty"`

	// OnFailure is where a run's last answer, and why it failed, go once
	// the run failed (its attempts spent, or an answer no retry changes).
	// +optional
	OnFailure *RunTarget `json:"onFailure,omitempty"`
}

// RunTarget is where an ended run's answer goes (docs/runs.md): a run of
// another Function, its request a POST of the answer, made in the same
// write that ends the run; or a message on a RabbitMQ queue of the
// platform's broker, kept with the run until the broker confirmed it.
// Chains of runs are at most 11 runs long, so that functions passing
// answers round in a circle stop.
//
// +kubebuilder:validation:XValidation:rule="has(self.function) != has(self.queue)",message="exactly one of function or queue must be set"
type RunTarget struct {
	// Function names the Function to run, in the same namespace. It may
	// not exist yet: its run waits, queued, for it, up to its maxAge.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Function string `json:"function,omitempty"`

	// Queue names the queue of the platform's broker (the activators'
	// --rabbitmq-url) the answer is published to, durable, declared
	// when missing. The amq. prefix is the broker's own.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('amq.')",message="queue names starting amq. are reserved by RabbitMQ"
	Queue string `json:"queue,omitempty"`
}

// Defaults of Async, the same as its CRD markers.
const (
	DefaultMaxAttempts      = 3
	DefaultMinBackoff       = time.Second
	DefaultMaxBackoff       = 5 * time.Minute
	DefaultMaxAge           = 6 * time.Hour
	DefaultAsyncConcurrency = 100
)

// Bounds of Async.
const (
	maxAttempts         = 100
	maxBackoff          = time.Hour
	maxAge              = 24 * time.Hour
	maxAsyncConcurrency = 10000
)

func (a *Async) setDefaults() {
	if a.MaxAttempts == 0 {
		a.MaxAttempts = DefaultMaxAttempts
	}
	defaultDuration(&a.MinBackoff, DefaultMinBackoff)
	defaultDuration(&a.MaxBackoff, DefaultMaxBackoff)
	defaultDuration(&a.MaxAge, DefaultMaxAge)
	if a.Concurrency == 0 {
		a.Concurrency = DefaultAsyncConcurrency
	}
}

func validateAsync(a *Async, p *field.Path) field.ErrorList {
	errs := inRange(p.Child("maxAttempts"), a.MaxAttempts, 1, maxAttempts)
	errs = append(errs, inRange(p.Child("concurrency"), a.Concurrency, 1, maxAsyncConcurrency)...)
	if a.MinBackoff != nil {
		errs = append(errs, durationInRange(p.Child("minBackoff"), a.MinBackoff.Duration, 0, maxBackoff)...)
	}
	if a.MaxBackoff != nil {
		errs = append(errs, durationInRange(p.Child("maxBackoff"), a.MaxBackoff.Duration, 0, maxBackoff)...)
	}
	if a.MinBackoff != nil && a.MaxBackoff != nil && a.MinBackoff.Duration > a.MaxBackoff.Duration {
		errs = append(errs, field.Invalid(p.Child("minBackoff"), a.MinBackoff.Duration.String(), "must not exceed maxBackoff"))
	}
	if a.MaxAge != nil {
		errs = append(errs, durationInRange(p.Child("maxAge"), a.MaxAge.Duration, time.Second, maxAge)...)
	}
	errs = append(errs, validateRunTarget(a.OnSuccess, p.Child("onSuccess"))...)
	return append(errs, validateRunTarget(a.OnFailure, p.Child("onFailure"))...)
}

func validateRunTarget(t *RunTarget, p *field.Path) field.ErrorList {
	switch {
	case t == nil:
		return nil
	case t.Function == "" && t.Queue == "":
		return field.ErrorList{field.Required(p, "exactly one of function or queue must be set")}
	case t.Function != "" && t.Queue != "":
		return field.ErrorList{field.Forbidden(p.Child("queue"), "exactly one of function or queue must be set, and function is")}
	case t.Queue != "":
		return validateTargetQueue(t.Queue, p.Child("queue"))
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1035Label(t.Function) {
		errs = append(errs, field.Invalid(p.Child("function"), t.Function, msg))
	}
	return errs
}

// maxQueueName bounds a RabbitMQ queue's name, in bytes.
const maxQueueName = 255

func validateTargetQueue(q string, p *field.Path) field.ErrorList {
	switch {
	case len(q) > maxQueueName:
		return field.ErrorList{field.TooLong(p, q, maxQueueName)}
	case strings.HasPrefix(q, "amq."):
		return field.ErrorList{field.Invalid(p, q, "queue names starting amq. are reserved by RabbitMQ")}
	}
	return nil
}
