package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	return errs
}
