package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionRun is one run of a function, asked for with kubectl: its
// request is submitted once as a run (docs/runs.md) and its state and
// answer are reported in its status, as a Job's are. It is immutable: a
// re-run is a new FunctionRun (metadata.generateName).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fnrun,categories=sless
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FunctionRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionRunSpec   `json:"spec"`
	Status FunctionRunStatus `json:"status,omitempty"`
}

// FunctionRunList is a list of FunctionRuns.
//
// +kubebuilder:object:root=true
type FunctionRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionRun `json:"items"`
}

// FunctionRunSpec is the request a FunctionRun makes of its function.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a FunctionRun is immutable: create another (metadata.generateName) to run again"
type FunctionRunSpec struct {
	// Function names the Function to run, in the FunctionRun's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Function string `json:"function"`

	// Method is the request's method.
	// +optional
	// +kubebuilder:default=POST
	// +kubebuilder:validation:Pattern=`^[A-Z]{1,16}$`
	Method string `json:"method,omitempty"`

	// Path is the request's path under the function's, with its query.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:Pattern=`^[/?]`
	// +kubebuilder:validation:MaxLength=2048
	Path string `json:"path,omitempty"`

	// Headers are the request's header fields.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Headers map[string]string `json:"headers,omitempty"`

	// Body is the request's body: a string is sent as it is
	// (text/plain unless Headers say otherwise), any other JSON value as
	// JSON (application/json).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Body *apiextensionsv1.JSON `json:"body,omitempty"`

	// TTLSecondsAfterFinished, when set, deletes the FunctionRun this
	// long after it ended, as a Job's does; its run is kept for the
	// runs' retention.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// FunctionRunPhase is where a FunctionRun is: Pending until its run is
// accepted, then its run's state.
//
// +kubebuilder:validation:Enum=Pending;Queued;Running;Succeeded;Failed;Cancelled;Expired
type FunctionRunPhase string

// The phases of a FunctionRun.
const (
	FunctionRunPending   FunctionRunPhase = "Pending"
	FunctionRunQueued    FunctionRunPhase = "Queued"
	FunctionRunRunning   FunctionRunPhase = "Running"
	FunctionRunSucceeded FunctionRunPhase = "Succeeded"
	FunctionRunFailed    FunctionRunPhase = "Failed"
	FunctionRunCancelled FunctionRunPhase = "Cancelled"
	FunctionRunExpired   FunctionRunPhase = "Expired"
)

// Ended says whether a FunctionRun in phase p will change no more.
func (p FunctionRunPhase) Ended() bool {
	return p == FunctionRunSucceeded || p == FunctionRunFailed || p == FunctionRunCancelled || p == FunctionRunExpired
}

// The condition types of a FunctionRun, as a Job's: Complete once it
// succeeded, Failed once it ended otherwise.
const (
	ConditionComplete = "Complete"
	ConditionFailed   = "Failed"
)

// Reasons of a FunctionRun's conditions.
const (
	// ReasonSucceeded: the function answered below 400.
	ReasonSucceeded = "Succeeded"
	// ReasonRunFailed: its attempts are over, or it answered a 4xx that
	// another attempt would not change.
	ReasonRunFailed = "RunFailed"
	ReasonCancelled = "Cancelled"
	ReasonExpired   = "Expired"
	// ReasonRefused: the activator refused the request (too large, not
	// a request it can keep); it was never run.
	ReasonRefused = "Refused"
)

// MaxFunctionRunResultBytes bounds the answer's body a FunctionRun's
// status holds, well within what etcd keeps of one object; the run's
// answer is whole at /runs/{runID}/result.
const MaxFunctionRunResultBytes = 32 << 10

// FunctionRunStatus is what became of a FunctionRun.
type FunctionRunStatus struct {
	// Phase is Pending until the run is accepted, then the run's state.
	// +optional
	Phase FunctionRunPhase `json:"phase,omitempty"`
	// RunID is its run's id: GET /runs/{runID} on the activator.
	// +optional
	RunID string `json:"runID,omitempty"`
	// Attempts counts the attempts started.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// Result is the function's answer to the last attempt that got one.
	// +optional
	Result *FunctionRunResult `json:"result,omitempty"`
	// Error says why the run ended as it did, or why it is not
	// accepted yet.
	// +optional
	Error string `json:"error,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FunctionRunResult is a function's answer as a FunctionRun keeps it.
type FunctionRunResult struct {
	// Status is the answer's HTTP status.
	Status int32 `json:"status"`
	// +optional
	ContentType string `json:"contentType,omitempty"`
	// Body is the answer's body when it is UTF-8 text, up to 32 KiB.
	// +optional
	Body string `json:"body,omitempty"`
	// Size is the body's whole size; Truncated says Body holds its
	// start, Binary that the body is not text and is not held.
	Size int64 `json:"size"`
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// +optional
	Binary bool `json:"binary,omitempty"`
}
