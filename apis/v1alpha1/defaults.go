package v1alpha1

import (
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults, the same values as the CRD's default markers, so that a manifest
// run by the local platform means what it means on Kubernetes. A test
// compares Default with the API server's defaulting.
const (
	DefaultNamespace              = "default"
	DefaultTimeoutSeconds         = 300
	DefaultMaxScale               = 10
	DefaultTarget                 = 100
	DefaultTargetUtilization      = 70
	DefaultWindow                 = 60 * time.Second
	DefaultScaleToZeroGracePeriod = 30 * time.Second
	DefaultTimezone               = "UTC"
	// DefaultPreWarm is the pre-warm of a cron trigger whose preWarm is
	// unset, until its function's start-up was measured (not a CRD
	// default: unset means follow the measurement).
	DefaultPreWarm           = 30 * time.Second
	DefaultPrefetch          = 10
	DefaultTargetQueueLength = 5
	DefaultMaxRetries        = 3
	// DefaultTriggerName names the HTTP trigger a Function without
	// triggers gets.
	DefaultTriggerName = "http"
)

// Default fills unset fields with their defaults. Go cannot tell an int set
// to 0 from one left out, so a 0 where 0 is out of range (timeoutSeconds,
// scale.max, ...) takes the default here, where the API server would refuse
// it; fields whose 0 is meaningful (scale.initial, maxRetries, durations)
// are pointers and keep an explicit 0.
func (f *Function) Default() {
	if f.Namespace == "" {
		f.Namespace = DefaultNamespace
	}
	s := &f.Spec
	if s.TimeoutSeconds == 0 {
		s.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if s.Protocol == "" {
		s.Protocol = ProtocolHTTP1
	}
	s.Scale.setDefaults()
	s.Async.setDefaults()
	if len(s.Triggers) == 0 {
		s.Triggers = []Trigger{{Name: DefaultTriggerName, HTTP: &HTTPTrigger{}}}
	}
	for i := range s.Triggers {
		s.Triggers[i].setDefaults()
	}
}

func (s *Scale) setDefaults() {
	if s.Max == 0 {
		s.Max = DefaultMaxScale
	}
	if s.Target == 0 {
		s.Target = DefaultTarget
	}
	if s.Metric == "" {
		s.Metric = MetricConcurrency
	}
	if s.TargetUtilization == 0 {
		s.TargetUtilization = DefaultTargetUtilization
	}
	defaultDuration(&s.Window, DefaultWindow)
	defaultDuration(&s.ScaleToZeroGracePeriod, DefaultScaleToZeroGracePeriod)
	if s.Owner == "" {
		s.Owner = OwnerSless
	}
}

func (t *Trigger) setDefaults() {
	if t.Enabled == nil {
		enabled := true
		t.Enabled = &enabled
	}
	if c := t.Cron; c != nil {
		if c.Timezone == "" {
			c.Timezone = DefaultTimezone
		}
	}
	if r := t.RabbitMQ; r != nil {
		if r.Prefetch == 0 {
			r.Prefetch = DefaultPrefetch
		}
		if r.TargetQueueLength == 0 {
			r.TargetQueueLength = DefaultTargetQueueLength
		}
		if r.MaxRetries == nil {
			n := int32(DefaultMaxRetries)
			r.MaxRetries = &n
		}
		if r.QueueType == "" {
			r.QueueType = QueueClassic
		}
	}
}

func defaultDuration(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}

// InitialReplicas is the number of instances to start a new Function with:
// scale.initial when set, else max(1, min) limited by max.
func (s *Scale) InitialReplicas() int32 {
	if s.Initial != nil {
		return *s.Initial
	}
	return min(max(1, s.Min), s.Max)
}

// EffectiveMaxDurationSeconds is what bounds a request whole: maxDurationSeconds,
// or timeoutSeconds when it is unset.
func (s *FunctionSpec) EffectiveMaxDurationSeconds() int32 {
	return max(s.MaxDurationSeconds, s.TimeoutSeconds)
}

// EffectiveDrainSeconds bounds an instance's drain: drainSeconds, or the
// maximum duration when it is unset.
func (s *FunctionSpec) EffectiveDrainSeconds() int32 {
	if s.DrainSeconds > 0 {
		return s.DrainSeconds
	}
	return s.EffectiveMaxDurationSeconds()
}

// EnvValues are the Function's variables set by value, as NAME=value:
// what the local platform gives its processes, and what a build's check
// of a handler loads it with (a Secret's or a ConfigMap's is the
// cluster's alone).
func (s *FunctionSpec) EnvValues() []string {
	out := make([]string, 0, len(s.Env))
	for _, e := range s.Env {
		if e.ValueFrom == nil {
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}

// EffectiveHandler is the handler to load: spec.handler, or the runtime's
// conventional entry point when it is unset.
func (s *FunctionSpec) EffectiveHandler() string {
	if s.Handler != "" {
		return s.Handler
	}
	switch s.Runtime {
	case RuntimeGo:
		return "Handle"
	case RuntimePython:
		return "main.handle"
	case RuntimeNode:
		return "index.handle"
	}
	return ""
}

// DefaultSecurityContext is the function container's security context where
// the Function sets none: what the Pod Security "restricted" level asks of
// a container, so that functions run in namespaces that enforce it. The
// user is left to the image: sless build's images run as 65532, by number,
// which the kubelet needs to check runAsNonRoot. Not a CRD default, since
// a user's securityContext replaces a CRD default as a whole.
func DefaultSecurityContext() *corev1.SecurityContext {
	nonRoot, escalation := true, false
	return &corev1.SecurityContext{
		RunAsNonRoot:             &nonRoot,
		AllowPrivilegeEscalation: &escalation,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// EffectiveSecurityContext is the function container's security context on
// Kubernetes: DefaultSecurityContext with every field spec.securityContext
// sets in place of the default. Within capabilities and seccompProfile too:
// capabilities {add: [NET_BIND_SERVICE]} keeps drop ALL.
func (s *FunctionSpec) EffectiveSecurityContext() *corev1.SecurityContext {
	sc := DefaultSecurityContext()
	if s.SecurityContext != nil {
		overlay(reflect.ValueOf(sc).Elem(), reflect.ValueOf(s.SecurityContext.DeepCopy()).Elem())
	}
	return sc
}

// overlay sets each field of the struct dst that is set (not zero) in src,
// going into structs both hold by pointer. By reflection, so that fields
// Kubernetes adds to SecurityContext later are overlaid too, not dropped.
func overlay(dst, src reflect.Value) {
	for i := range src.NumField() {
		from, to := src.Field(i), dst.Field(i)
		switch {
		case from.IsZero():
		case from.Kind() == reflect.Pointer && from.Elem().Kind() == reflect.Struct && !to.IsNil():
			overlay(to.Elem(), from.Elem())
		default:
			to.Set(from)
		}
	}
}

// IsEnabled reports whether the trigger runs: enabled is unset or true.
func (t *Trigger) IsEnabled() bool { return t.Enabled == nil || *t.Enabled }
