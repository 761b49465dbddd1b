// Package adminapi is the JSON admin API of functions, the one the CLI and
// the web console use, over either home of functions: the local platform
// (sless dev) or the cluster (the activator, from its watch of Functions).
// Each home is a Backend; the routes, their shapes and errors live here
// once.
package adminapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/runs"
	"sless.dev/sless/timeline"
)

// FunctionRoute is the path of one function; its other routes live
// under it.
const FunctionRoute = "/v1/namespaces/{namespace}/functions/{name}"

// StatsWindow is the window of Status.Stats.
const StatsWindow = 5 * time.Minute

// Status is a function as every backend shows it.
type Status struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Runtime is the function's runtime, or "" for a Function that
	// brings its own server.
	Runtime string `json:"runtime"`
	URL     string `json:"url"`
	// State is building, failed (nothing to run), crashing (its instances
	// cannot become ready: they crash, or run without passing their
	// readiness check), idle (no instance), starting or ready; Error says
	// why it is failed or crashing, and Reason, when its instances say,
	// names the cause as the InstancesReady condition of a Function does
	// (v1alpha1.ReasonCrashing, ReasonReadinessFailing, ...).
	State    State  `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Error    string `json:"error,omitempty"`
	Desired  int    `json:"desired"`
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
	// Buffered counts the requests waiting at the activators for an
	// instance with room; Panic is set while the autoscaler's last
	// decision was in panic mode; QueueDepth sums the messages ready on
	// its queues. On Kubernetes these are the autoscaler's, which every
	// activator reports to, and the activator's own when it cannot be
	// reached.
	Buffered   int   `json:"buffered"`
	Panic      bool  `json:"panic,omitempty"`
	QueueDepth int64 `json:"queueDepth,omitempty"`
	// Triggers are its triggers and what each is doing.
	Triggers []TriggerStatus `json:"triggers"`
	// Stats are its invocations over the last StatsWindow.
	Stats timeline.Stats `json:"stats"`
	// Overrides, in sless dev, are the changes made to it through this
	// API, which hold until sless dev stops; Spec has them applied. On
	// Kubernetes a change is a patch of the Function itself.
	Overrides *Overrides            `json:"overrides,omitempty"`
	Spec      v1alpha1.FunctionSpec `json:"spec"`
}

// RuntimeShown is the runtime as a table shows it: a Function without
// one brings its own server.
func (s *Status) RuntimeShown() string { return cmp.Or(s.Runtime, "own server") }

// TriggerStatus is one trigger of a function.
type TriggerStatus struct {
	Name string `json:"name"`
	// Kind is http, cron or rabbitmq.
	Kind  string `json:"kind"`
	Queue string `json:"queue,omitempty"`
	// Schedule and Timezone are a cron trigger's, so that a trigger's row
	// says what fires it without the spec beside it.
	Schedule string `json:"schedule,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// State is disabled for a trigger with enabled: false, else active
	// for HTTP and cron. A RabbitMQ trigger is consuming (a ready
	// instance consumes it), waiting (no instance: its first message
	// wakes the function), disabled (also when the platform has no
	// broker) or failing, Error saying why: a bad URL, refused
	// credentials, a missing queue.
	State TriggerState `json:"state"`
	Error string       `json:"error,omitempty"`
}

// State is what a function is doing, in the words every backend, the CLI
// and the console share.
type State string

// The states of a function, from its source to serving.
const (
	// StateBuilding: sless dev builds its source; nothing runs yet.
	StateBuilding State = "building"
	// StateFailed: there is nothing to run (a failed build, a spec the
	// controller refuses).
	StateFailed State = "failed"
	// StateCrashing: its instances cannot become ready.
	StateCrashing State = "crashing"
	// StateIdle: no instance, none wanted (scaled to zero).
	StateIdle State = "idle"
	// StateStarting: instances are wanted or starting, none ready.
	StateStarting State = "starting"
	// StateReady: at least one instance serves.
	StateReady State = "ready"
)

// TriggerState is what one trigger of a function is doing.
type TriggerState string

// The states of a trigger. A backend starts from NewTriggerStatus and
// refines a RabbitMQ trigger's waiting into consuming or failing.
const (
	TriggerActive    TriggerState = "active"
	TriggerDisabled  TriggerState = "disabled"
	TriggerWaiting   TriggerState = "waiting"
	TriggerConsuming TriggerState = "consuming"
	TriggerFailing   TriggerState = "failing"
)

// NewTriggerStatus is t as declared: its kind, and disabled, active (HTTP,
// cron) or waiting (RabbitMQ: the backend says whether it consumes or
// fails).
func NewTriggerStatus(t v1alpha1.Trigger) TriggerStatus {
	ts := TriggerStatus{Name: t.Name, Kind: "http", State: TriggerActive}
	switch {
	case t.Cron != nil:
		ts.Kind, ts.Schedule, ts.Timezone = "cron", t.Cron.Schedule, t.Cron.Timezone
	case t.RabbitMQ != nil:
		ts.Kind, ts.Queue, ts.State = "rabbitmq", t.RabbitMQ.Queue, TriggerWaiting
	}
	if !t.IsEnabled() {
		ts.State = TriggerDisabled
	}
	return ts
}

// List is the answer of GET /v1/functions.
type List[S any] struct {
	Functions []S `json:"functions"`
	// Errors are the manifests a ManifestLoader could not load.
	Errors []ManifestError `json:"errors,omitempty"`
}

// ManifestError is a manifest that could not be loaded: it does not parse,
// a function in it is invalid, or declares a name another manifest has.
// The functions it declared run as last loaded, or not at all.
type ManifestError struct {
	File string `json:"file,omitempty"`
	// Function is namespace/name when the error is about one function.
	Function string `json:"function,omitempty"`
	Error    string `json:"error"`
}

// ManifestLoader is a Backend that loads manifests itself (sless dev,
// from a directory) and so may fail to; on Kubernetes the API server
// refuses a bad manifest at apply.
type ManifestLoader interface {
	ManifestErrors(ctx context.Context) []ManifestError
}

// Overrides are a session's changes to a function in sless dev.
type Overrides struct {
	// Triggers maps a trigger's name to whether it is enabled.
	Triggers map[string]bool `json:"triggers,omitempty"`
	Min      *int32          `json:"min,omitempty"`
	Max      *int32          `json:"max,omitempty"`
}

// IsZero reports whether o changes nothing.
func (o Overrides) IsZero() bool { return len(o.Triggers) == 0 && o.Min == nil && o.Max == nil }

// Scale is a change of a function's bounds: either or both.
type Scale struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

// Check refuses bounds that a Function could not have, given its scale
// now: v1alpha1's check of them, which manifests and the CRD make too.
func (s Scale) Check(spec v1alpha1.Scale) error {
	next := spec
	if s.Min != nil {
		next.Min = *s.Min
	}
	if s.Max != nil {
		next.Max = *s.Max
	}
	if errs := v1alpha1.ValidateScaleBounds(&next, field.NewPath("spec", "scale")); len(errs) > 0 {
		return BadInput("%v", errs.ToAggregate())
	}
	return nil
}

// Manifest is a function's manifest as the platform has it.
type Manifest struct {
	// File is the manifest's file in sless dev; empty on Kubernetes.
	File string `json:"file,omitempty"`
	YAML string `json:"yaml"`
}

// Target is where an invoke action sends its request.
type Target struct {
	URL     string
	Timeout time.Duration
}

// Backend is a home of functions. Its errors are the package's (Unknown,
// NotFound, BadInput) or a failure of the backend itself (503).
type Backend[S any] interface {
	Functions(ctx context.Context) ([]S, error)
	Function(ctx context.Context, namespace, name string) (S, error)
	SetTrigger(ctx context.Context, namespace, name, trigger string, enabled bool) (S, error)
	SetScale(ctx context.Context, namespace, name string, s Scale) (S, error)
	Manifest(ctx context.Context, namespace, name string) (Manifest, error)
	Target(ctx context.Context, namespace, name string) (Target, error)
}

// Error is an answer with its own status code.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unknown is the error of a function no one declared.
func Unknown(namespace, name string) error {
	return &Error{http.StatusNotFound, "unknown function " + namespace + "/" + name}
}

// NotFound is the error of a part of a function that does not exist.
func NotFound(format string, args ...any) error {
	return &Error{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// BadInput is the error of a request that cannot be done.
func BadInput(format string, args ...any) error {
	return &Error{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// NewMux serves b's routes, each function's timeline from the one tl
// gives at each request (the platform's, or every activator's), and the
// runs of store (nil when the platform keeps none), on a mux a backend
// may add routes of its own to.
func NewMux[S any](b Backend[S], tl func(context.Context) *timeline.Timeline, store runs.Store) *http.ServeMux {
	h := handler[S]{b: b, tl: tl, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/functions", h.list)
	mux.HandleFunc("GET "+FunctionRoute, h.get)
	mux.HandleFunc("GET "+FunctionRoute+"/timeline", h.timeline)
	mux.HandleFunc("GET "+FunctionRoute+"/manifest", h.manifest)
	mux.HandleFunc("PATCH "+FunctionRoute+"/triggers/{trigger}", h.setTrigger)
	mux.HandleFunc("PATCH "+FunctionRoute+"/scale", h.setScale)
	mux.HandleFunc("POST "+FunctionRoute+"/invoke", h.invoke)
	h.handleRuns(mux, store)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, &Error{http.StatusNotFound, "no such route: " + r.Method + " " + r.URL.Path})
	})
	return mux
}

type handler[S any] struct {
	b      Backend[S]
	tl     func(context.Context) *timeline.Timeline // the timeline of the moment
	client *http.Client                             // the invoke action's
}

func (h handler[S]) list(w http.ResponseWriter, r *http.Request) {
	fns, err := h.b.Functions(r.Context())
	if err != nil {
		WriteError(w, err)
		return
	}
	list := List[S]{Functions: fns}
	if ml, ok := h.b.(ManifestLoader); ok {
		list.Errors = ml.ManifestErrors(r.Context())
	}
	httpjson.Write(w, http.StatusOK, list)
}

func (h handler[S]) get(w http.ResponseWriter, r *http.Request) {
	st, err := h.b.Function(r.Context(), r.PathValue("namespace"), r.PathValue("name"))
	writeResult(w, st, err)
}

func (h handler[S]) timeline(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	s, ok := h.tl(r.Context()).Series(time.Now(), ns, name)
	if !ok {
		WriteError(w, Unknown(ns, name))
		return
	}
	httpjson.Write(w, http.StatusOK, s)
}

func (h handler[S]) manifest(w http.ResponseWriter, r *http.Request) {
	m, err := h.b.Manifest(r.Context(), r.PathValue("namespace"), r.PathValue("name"))
	writeResult(w, m, err)
}

// setTrigger answers PATCH .../triggers/{trigger} {"enabled": bool}.
func (h handler[S]) setTrigger(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Enabled *bool `json:"enabled"`
	}
	if !readJSON(w, r, &body, maxActionBody) {
		return
	}
	if body.Enabled == nil {
		WriteError(w, BadInput(`the body must be {"enabled": true} or {"enabled": false}`))
		return
	}
	st, err := h.b.SetTrigger(r.Context(), r.PathValue("namespace"), r.PathValue("name"), r.PathValue("trigger"), *body.Enabled)
	writeResult(w, st, err)
}

// setScale answers PATCH .../scale {"min": n, "max": n}: either or both.
func (h handler[S]) setScale(w http.ResponseWriter, r *http.Request) {
	var s Scale
	if !readJSON(w, r, &s, maxActionBody) {
		return
	}
	if s.Min == nil && s.Max == nil {
		WriteError(w, BadInput(`the body must set min, max or both: {"min": 1, "max": 5}`))
		return
	}
	st, err := h.b.SetScale(r.Context(), r.PathValue("namespace"), r.PathValue("name"), s)
	writeResult(w, st, err)
}

// maxActionBody bounds an action's JSON body; maxInvokeBody an invoke
// action's, its request's body included.
const (
	maxActionBody = 64 << 10
	maxInvokeBody = 8 << 20
)

// Invocation is an invoke action: a request sent to the function through
// the activator, as any client's.
type Invocation struct {
	Method string `json:"method"`
	// Path is appended to the function's URL: "/", "/items?id=1".
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// InvocationResult is the function's answer to an invoke action.
type InvocationResult struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	// Truncated is set when the body was longer than shown.
	Truncated  bool    `json:"truncated,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// maxShownBody bounds the answer's body an invoke action shows.
const maxShownBody = 1 << 20

// invoke answers POST .../invoke: the function's answer, or 502 when none
// came.
func (h handler[S]) invoke(w http.ResponseWriter, r *http.Request) {
	var in Invocation
	if !readJSON(w, r, &in, maxInvokeBody) {
		return
	}
	target, err := h.b.Target(r.Context(), r.PathValue("namespace"), r.PathValue("name"))
	if err != nil {
		WriteError(w, err)
		return
	}
	if in.Path != "" && !strings.HasPrefix(in.Path, "/") && !strings.HasPrefix(in.Path, "?") {
		WriteError(w, BadInput("path must start with / or ?"))
		return
	}
	// The activator answers 504 at the function's timeout; this one
	// only guards against a lost answer.
	ctx, cancel := context.WithTimeout(r.Context(), target.Timeout+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, cmp.Or(in.Method, http.MethodGet), target.URL+in.Path, strings.NewReader(in.Body))
	if err != nil {
		WriteError(w, BadInput("bad request: %v", err))
		return
	}
	for k, v := range in.Headers {
		req.Header.Set(k, v)
	}
	res, err := h.call(req)
	if err != nil {
		WriteError(w, &Error{http.StatusBadGateway, err.Error()})
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// call sends req and reads its answer, up to maxShownBody of its body.
func (h handler[S]) call(req *http.Request) (InvocationResult, error) {
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return InvocationResult{}, fmt.Errorf("invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxShownBody+1))
	if err != nil {
		return InvocationResult{}, fmt.Errorf("invoke: read the answer: %w", err)
	}
	res := InvocationResult{Status: resp.StatusCode, Headers: make(map[string]string, len(resp.Header)),
		DurationMs: float64(time.Since(start).Microseconds()) / 1000}
	if len(body) > maxShownBody {
		body, res.Truncated = body[:maxShownBody], true
	}
	res.Body = string(body)
	for k, v := range resp.Header {
		res.Headers[k] = strings.Join(v, ", ")
	}
	return res, nil
}

func writeResult(w http.ResponseWriter, v any, err error) {
	if err != nil {
		WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, v)
}

// WriteError answers err as {"error": ...}: with its own code when it is
// an *Error, else 503 (the backend failed).
func WriteError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if e, ok := errors.AsType[*Error](err); ok {
		code = e.Code
	}
	httpjson.Error(w, code, err.Error())
}

// readJSON decodes r's body, up to limit bytes, into v, or answers 400 or
// 413 and reports false.
func readJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		WriteError(w, &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is more than %d bytes", limit)})
		return false
	}
	if err != nil {
		WriteError(w, BadInput("bad JSON body: %v", err))
		return false
	}
	return true
}
