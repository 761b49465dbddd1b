package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Function is a user function that sless builds or pulls, runs behind a
// queue-proxy, exposes through the activator and scales on load, queue depth
// and cron schedules.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fn,categories=sless
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionSpec   `json:"spec"`
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of Functions, as returned by list calls.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}

// Runtime names the language runtime that hosts a function's handler.
//
// +kubebuilder:validation:Enum=go;python;node
type Runtime string

// The runtimes sless ships (see runtimes/).
const (
	RuntimeGo     Runtime = "go"
	RuntimePython Runtime = "python"
	RuntimeNode   Runtime = "node"
)

// Protocol is what a function's process speaks on its port.
//
// +kubebuilder:validation:Enum=http1;h2c
type Protocol string

// The protocols a function's process may speak.
const (
	// ProtocolHTTP1 is HTTP/1.1, the default.
	ProtocolHTTP1 Protocol = "http1"
	// ProtocolH2C is HTTP/2 without TLS, with prior knowledge: a gRPC
	// server's (Knative's container port named h2c).
	ProtocolH2C Protocol = "h2c"
)

// FunctionSpec is what the user asks for.
// +kubebuilder:validation:XValidation:rule="has(self.runtime) || !has(self.handler)",message="only a runtime loads a handler: a Function without a runtime brings its own server",fieldPath=".handler"
// +kubebuilder:validation:XValidation:rule="!has(self.runtime) || !has(self.command)",message="a runtime starts the function: command is for a Function without a runtime, which brings its own server",fieldPath=".command"
// +kubebuilder:validation:XValidation:rule="!has(self.maxDurationSeconds) || self.maxDurationSeconds == 0 || !has(self.timeoutSeconds) || self.maxDurationSeconds >= self.timeoutSeconds",message="maxDurationSeconds must be timeoutSeconds at least: it bounds the whole request, timeoutSeconds its start",fieldPath=".maxDurationSeconds"
//
// Where a field is run-mode specific
// (image on Kubernetes, source locally) its doc says so; the shared
// validation enforces it for the mode at hand.
type FunctionSpec struct {
	// Runtime is the language runtime of the handler. Unset, the Function
	// brings its own HTTP server, in any language: its image on
	// Kubernetes, its command under sless dev, which listens on $PORT and
	// answers GET /healthz once ready (Knative's container contract).
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// Source is the directory holding the handler's code, relative to the
	// manifest. Required by the local platform, which builds and runs it;
	// ignored on Kubernetes, which runs Image.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Source string `json:"source,omitempty"`

	// Handler is the entry point inside the source: an exported Go function
	// name (default Handle), or module.function for Python (default
	// main.handle) and Node (default index.handle).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Handler string `json:"handler,omitempty"`

	// Image is the container image to run on Kubernetes, built from the
	// source by sless build or sless deploy, or, for a Function without a
	// runtime, the image of its own server. Required on Kubernetes.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Image string `json:"image,omitempty"`

	// Command starts a Function without a runtime, its own server: run in
	// the source directory by sless dev, where it is required, and the
	// container's command on Kubernetes, where it replaces the image's
	// entrypoint (unset, the entrypoint runs). So one manifest runs the
	// same server in both places.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command,omitempty"`

	// Protocol is what the function's process speaks on its port: http1
	// (HTTP/1.1, the default) or h2c (HTTP/2 without TLS, what gRPC
	// servers speak). Either way clients may call in HTTP/1.1 or HTTP/2
	// (h2c): the queue-proxy speaks the process's protocol to it.
	// +optional
	// +kubebuilder:default=http1
	Protocol Protocol `json:"protocol,omitempty"`

	// Env is passed to the function process.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Resources are the function container's requests and limits.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// SecurityContext is the function container's security context on
	// Kubernetes. Unset, the container runs with defaults that pass the
	// Pod Security "restricted" level: runAsNonRoot true,
	// allowPrivilegeEscalation false, capabilities drop ALL and seccomp
	// profile RuntimeDefault (images built by sless build run as user
	// 65532). Each field set here replaces its default and the others
	// stay. An image that needs root sets runAsNonRoot false and
	// runAsUser 0; a namespace that enforces "restricted" then refuses
	// its pods. Ignored by the local platform, which runs processes.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.runAsUser) || self.runAsUser != 0 || (has(self.runAsNonRoot) && !self.runAsNonRoot)",message="runAsUser 0 is root: set runAsNonRoot false too, since it defaults to true",fieldPath=".runAsUser"
	// +kubebuilder:validation:XValidation:rule="!has(self.privileged) || !self.privileged || (has(self.allowPrivilegeEscalation) && self.allowPrivilegeEscalation)",message="privileged needs allowPrivilegeEscalation true, since it defaults to false",fieldPath=".privileged"
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`

	// TimeoutSeconds bounds the wait for a request's answer to start,
	// queueing included: the function's response head, or a WebSocket's
	// handshake. The activator and the queue-proxy both enforce it, and
	// answer 504 when it passes (Knative's responseStartTimeoutSeconds).
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// IdleTimeoutSeconds bounds the silence between a streamed answer's
	// bytes: a function that sends nothing for longer has its answer cut
	// (Knative's idleTimeoutSeconds). 0, the default, sets no bound but
	// the maximum duration.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	IdleTimeoutSeconds int32 `json:"idleTimeoutSeconds,omitempty"`

	// MaxDurationSeconds bounds a request whole, its streamed answer
	// included (Knative's timeoutSeconds); not an open WebSocket, which
	// lasts until either side closes it or its instance's drain ends.
	// Unset, it is timeoutSeconds; set, it is timeoutSeconds at least.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MaxDurationSeconds int32 `json:"maxDurationSeconds,omitempty"`

	// DrainSeconds bounds how long an instance that is going (a
	// scale-down, a rollout, a delete) keeps serving what it has: the
	// requests in flight and the open WebSockets, which are closed
	// cleanly when it passes. Unset, it is the maximum duration, so that
	// a request in flight can finish.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	DrainSeconds int32 `json:"drainSeconds,omitempty"`

	// Concurrency is the hard limit of requests one instance handles at
	// once; 0 means no limit. Like Knative's containerConcurrency.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Concurrency int32 `json:"concurrency,omitempty"`

	// Scale tells the autoscaler how many instances to run.
	// +optional
	// +kubebuilder:default={}
	Scale Scale `json:"scale,omitempty"`

	// Async bounds the function's runs (Prefer: respond-async).
	// +optional
	// +kubebuilder:default={}
	Async Async `json:"async,omitempty"`

	// Triggers are the ways the function is invoked. A Function without
	// triggers gets one HTTP trigger named "http".
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:default={{name: "http", http: {}}}
	// +kubebuilder:validation:MaxItems=16
	Triggers []Trigger `json:"triggers,omitempty"`
}

// ScaleMetric is the load signal the autoscaler tracks against Scale.Target.
//
// +kubebuilder:validation:Enum=concurrency;rps
type ScaleMetric string

// The metrics the autoscaler understands.
const (
	// MetricConcurrency tracks requests in flight per instance.
	MetricConcurrency ScaleMetric = "concurrency"
	// MetricRPS tracks requests per second per instance.
	MetricRPS ScaleMetric = "rps"
)

// ScaleOwner names the one component that writes a function's replicas, so
// that two autoscalers never fight over them.
//
// +kubebuilder:validation:Enum=sless;keda
type ScaleOwner string

// The possible owners of replicas.
const (
	// OwnerSless lets the sless autoscaler write replicas directly.
	OwnerSless ScaleOwner = "sless"
	// OwnerKEDA hands replicas to a KEDA ScaledObject, fed by the sless
	// autoscaler through KEDA's external scaler contract.
	OwnerKEDA ScaleOwner = "keda"
)

// Scale holds the autoscaling settings, with Knative KPA's meaning. The CEL
// rules guard with has() only because the API server checks them against
// the bare default {}; stored objects always have min and max.
//
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="min must not exceed max",fieldPath=".min"
// +kubebuilder:validation:XValidation:rule="!has(self.initial) || !has(self.min) || !has(self.max) || (self.initial >= self.min && self.initial <= self.max)",message="initial must lie within [min, max]",fieldPath=".initial"
type Scale struct {
	// Min is the number of instances kept at all times; 0 allows scale to
	// zero.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Min int32 `json:"min,omitempty"`

	// Max is the most instances the autoscaler will ask for.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Max int32 `json:"max,omitempty"`

	// Initial is the number of instances started when the Function is
	// created. Unset means max(1, min), limited by max; 0 starts at zero.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Initial *int32 `json:"initial,omitempty"`

	// Target is the soft per-instance target of the metric: requests in
	// flight for concurrency, requests per second for rps.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Target int32 `json:"target,omitempty"`

	// Metric is the load signal scaled on.
	// +optional
	// +kubebuilder:default=concurrency
	Metric ScaleMetric `json:"metric,omitempty"`

	// TargetUtilization is the percentage of Target the autoscaler aims
	// for, leaving headroom for bursts.
	// +optional
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	TargetUtilization int32 `json:"targetUtilization,omitempty"`

	// Window is the stable window the load is averaged over; the panic
	// window is 10% of it. Between 6s and 1h, as in Knative.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('6s') && duration(self) <= duration('1h')",message="window must be between 6s and 1h"
	Window *metav1.Duration `json:"window,omitempty"`

	// ScaleToZeroGracePeriod is how long the last instance is kept after a
	// whole idle stable window, before scaling to zero.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="scaleToZeroGracePeriod must be at most 1h"
	ScaleToZeroGracePeriod *metav1.Duration `json:"scaleToZeroGracePeriod,omitempty"`

	// Owner is the component that writes replicas. Functions with RabbitMQ
	// triggers on Kubernetes are always scaled through KEDA.
	// +optional
	// +kubebuilder:default=sless
	Owner ScaleOwner `json:"owner,omitempty"`
}

// Trigger is one way a function is invoked. Exactly one of HTTP, Cron and
// RabbitMQ is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.http), has(self.cron), has(self.rabbitmq)].filter(x, x).size() == 1",message="exactly one of http, cron or rabbitmq must be set"
type Trigger struct {
	// Name identifies the trigger in records and metrics; unique within
	// the Function.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Enabled false stops the trigger without deleting it: its HTTP
	// route answers 404 naming it, its cron does not fire, its queue is
	// not consumed (nor scaled on).
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// HTTP exposes the function through the activator.
	// +optional
	HTTP *HTTPTrigger `json:"http,omitempty"`

	// Cron invokes the function on a schedule, warming it up first.
	// +optional
	Cron *CronTrigger `json:"cron,omitempty"`

	// RabbitMQ consumes a queue, one invocation per message.
	// +optional
	RabbitMQ *RabbitMQTrigger `json:"rabbitmq,omitempty"`
}

// HTTPTrigger routes /fn/<namespace>/<name> and <name>.<namespace>.<domain>
// to the function. It has no settings yet; its presence is the switch.
type HTTPTrigger struct{}

// CronTrigger fires the function on a schedule through the activator.
type CronTrigger struct {
	// Schedule in standard five-field cron syntax, or a descriptor such as
	// @hourly or @every 5m.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Schedule string `json:"schedule"`

	// Timezone is the IANA time zone the schedule is read in.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	Timezone string `json:"timezone,omitempty"`

	// Body is sent as the request body of each invocation.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Body string `json:"body,omitempty"`

	// PreWarm is how long before each fire time the function is scaled to
	// at least one instance, so the invocation finds it warm. 0 disables;
	// unset, it is the function's measured start-up from zero plus half
	// of it (at least 1s more), 30s until a start was measured.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="preWarm must be at most 1h"
	PreWarm *metav1.Duration `json:"preWarm,omitempty"`
}

// RabbitMQTrigger consumes a RabbitMQ queue: each message is one invocation,
// acknowledged after a 2xx answer and dead-lettered after MaxRetries.
type RabbitMQTrigger struct {
	// Queue is the queue to consume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Queue string `json:"queue"`

	// ConnectionSecret names a Secret in the Function's namespace whose key
	// "url" holds the AMQP URL. Required on Kubernetes; the local platform
	// uses its own broker URL.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConnectionSecret string `json:"connectionSecret,omitempty"`

	// Prefetch is the most unacknowledged messages one instance holds; it
	// is capped at the Function's concurrency when that is set.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Prefetch int32 `json:"prefetch,omitempty"`

	// TargetQueueLength is the number of ready messages per instance the
	// autoscaler aims for (KEDA QueueLength semantics).
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	TargetQueueLength int32 `json:"targetQueueLength,omitempty"`

	// ActivationQueueLength is the queue length above which a function at
	// zero is woken up.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	ActivationQueueLength int32 `json:"activationQueueLength,omitempty"`

	// MaxRetries is how often a failed message is redelivered before it is
	// dead-lettered.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// DeadLetterQueue receives messages that failed MaxRetries times.
	// Unset, they are dropped after being logged and counted.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`

	// QueueType is the type of Queue: the queues sless declares for the
	// trigger (retries, dead letters) are of the same type. A quorum
	// queue counts the returns of a message whose instance died holding
	// it, and its x-delivery-limit bounds them.
	// +optional
	// +kubebuilder:default=classic
	QueueType QueueType `json:"queueType,omitempty"`
}

// QueueType is a RabbitMQ queue type.
//
// +kubebuilder:validation:Enum=classic;quorum
type QueueType string

// The queue types a RabbitMQ trigger consumes.
const (
	// QueueClassic is RabbitMQ's classic queue: no count of returns.
	QueueClassic QueueType = "classic"
	// QueueQuorum is a replicated quorum queue (RabbitMQ 3.10 or later,
	// for its message TTLs): it counts a message's returns in
	// x-delivery-count.
	QueueQuorum QueueType = "quorum"
)

// FunctionStatus is what sless observed and did. The replica counts are
// written even when 0, and a stored status without them (written before
// they were) reads as 0, so that the REPLICAS and DESIRED columns of
// kubectl get show 0 at zero rather than nothing.
type FunctionStatus struct {
	// Conditions: Ready, and the detail conditions behind it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// URL is where the function's HTTP trigger is served.
	// +optional
	URL string `json:"url,omitempty"`

	// Replicas is the number of instances running.
	// +optional
	// +kubebuilder:default=0
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of instances ready for requests.
	// +optional
	// +kubebuilder:default=0
	ReadyReplicas int32 `json:"readyReplicas"`

	// DesiredReplicas is the autoscaler's latest decision.
	// +optional
	// +kubebuilder:default=0
	DesiredReplicas int32 `json:"desiredReplicas"`

	// Triggers are the controller's last checks of the enabled RabbitMQ
	// triggers (their Secret, URL, broker and queue), one per trigger;
	// the TriggersReady condition sums them up for people.
	// +optional
	// +listType=map
	// +listMapKey=name
	Triggers []TriggerStatus `json:"triggers,omitempty"`
}

// TriggerStatus is the controller's last check of one trigger.
type TriggerStatus struct {
	// Name is the trigger's.
	Name string `json:"name"`
	// Ready is whether it can be consumed.
	Ready bool `json:"ready"`
	// Message says why not.
	// +optional
	Message string `json:"message,omitempty"`
}
