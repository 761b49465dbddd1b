// Package functionrun reconciles FunctionRuns: each is submitted once as
// a run through the activators' runs API, the object's UID its
// Idempotency-Key (a controller restarted mid-submission gets the same
// run back), and its run's state, attempts and answer are copied into its
// status until it ends, as a Job reports its pods.
package functionrun

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runclient"
)

// Name is the reconciler's name, in logs, metrics and events.
const Name = "sless-functionrun"

// Finalizer holds a FunctionRun whose run has not ended, so that deleting
// it cancels the run.
const Finalizer = "sless.dev/cancel-run"

// The FunctionRun reconciler's access (config/rbac/role.yaml, `make
// generate`).
//
// +kubebuilder:rbac:groups=sless.dev,resources=functionruns,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=sless.dev,resources=functionruns/status,verbs=update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=functionruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure a Reconciler.
type Options struct {
	// Runs is the activators' runs API.
	Runs *runclient.Client
	// Workers is how many FunctionRuns are reconciled at once (8).
	Workers int
	// Poll is how often a run is read while it is young (1 s); older
	// runs are read less often, up to MaxPoll (30 s).
	Poll, MaxPoll time.Duration
}

// Reconciler keeps each FunctionRun's status its run's.
type Reconciler struct {
	client client.Client
	events events.EventRecorder
	opts   Options
}

// New returns a reconciler on mgr's client and events.
func New(mgr manager.Manager, opts Options) *Reconciler {
	if opts.Workers < 1 {
		opts.Workers = 8
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.MaxPoll <= 0 {
		opts.MaxPoll = 30 * time.Second
	}
	return &Reconciler{client: mgr.GetClient(), events: mgr.GetEventRecorder(Name), opts: opts}
}

// SetupWithManager registers the reconciler. A FunctionRun's own status
// writes do not wake it: it reads its run on a timer.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	deleting := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !e.ObjectNew.GetDeletionTimestamp().IsZero() }}
	return ctrl.NewControllerManagedBy(mgr).
		Named("functionrun").
		For(&v1alpha1.FunctionRun{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deleting))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(r)
}

// callTimeout bounds a call of the runs API.
const callTimeout = 15 * time.Second

// Reconcile submits a FunctionRun's run once, then follows it to its end;
// an ended FunctionRun with a ttlSecondsAfterFinished is deleted once it
// passed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fr v1alpha1.FunctionRun
	if err := r.client.Get(ctx, req.NamespacedName, &fr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch {
	case !fr.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.finalize(ctx, &fr)
	case fr.Status.Phase.Ended():
		if err := r.release(ctx, &fr); err != nil {
			return ctrl.Result{}, err
		}
		return r.expire(ctx, &fr)
	}
	status := fr.Status.DeepCopy()
	var next ctrl.Result
	var err error
	if status.RunID == "" {
		next, err = r.submit(ctx, &fr, status)
	} else {
		next, err = r.follow(ctx, &fr, status)
	}
	if werr := r.writeStatus(ctx, &fr, status); werr != nil {
		return ctrl.Result{}, werr
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if status.Phase.Ended() {
		if err := r.release(ctx, &fr); err != nil {
			return ctrl.Result{}, err
		}
		return r.expire(ctx, &fr)
	}
	return next, nil
}

// submit submits fr's run, having first put the finalizer on it.
func (r *Reconciler) submit(ctx context.Context, fr *v1alpha1.FunctionRun, status *v1alpha1.FunctionRunStatus) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(fr, Finalizer) {
		patch := client.MergeFrom(fr.DeepCopy())
		controllerutil.AddFinalizer(fr, Finalizer)
		if err := r.client.Patch(ctx, fr, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add the finalizer: %w", err)
		}
	}
	req, err := runclient.RequestOf(&fr.Spec)
	if err != nil {
		end(status, v1alpha1.FunctionRunFailed, v1alpha1.ReasonRefused, err.Error())
		return ctrl.Result{}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	accepted, err := r.opts.Runs.Submit(cctx, fr.Namespace, fr.Spec.Function, string(fr.UID), req)
	status.Phase = v1alpha1.FunctionRunPending
	switch code := runclient.Code(err); {
	case err == nil:
		// Read as any run is: a submission made again (a status that
		// was not written) may answer a run already ended.
		status.RunID, status.Error = string(accepted.ID), ""
		r.events.Eventf(fr, nil, corev1.EventTypeNormal, "Submitted", "Submit", "run %s of %s", accepted.ID, fr.Spec.Function)
		return r.follow(ctx, fr, status)
	case code == http.StatusNotFound:
		status.Error = fmt.Sprintf("no Function %s in namespace %s to run (%v)", fr.Spec.Function, fr.Namespace, err)
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	case code == http.StatusNotImplemented:
		status.Error = "the activators keep no runs: they need a database (--database-url)"
		return ctrl.Result{RequeueAfter: r.opts.MaxPoll}, nil
	case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
		end(status, v1alpha1.FunctionRunFailed, v1alpha1.ReasonRefused, "the activator refused the run: "+err.Error())
		return ctrl.Result{}, nil
	default:
		status.Error = "the run could not be submitted yet: " + err.Error()
		return ctrl.Result{}, fmt.Errorf("submit the run of %s/%s: %w", fr.Namespace, fr.Name, err)
	}
}

// follow copies fr's run into its status, its answer once it ended.
func (r *Reconciler) follow(ctx context.Context, fr *v1alpha1.FunctionRun, status *v1alpha1.FunctionRunStatus) (ctrl.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	id := runs.ID(status.RunID)
	run, err := r.opts.Runs.Get(cctx, id, 0)
	switch {
	case runclient.Code(err) == http.StatusNotFound:
		end(status, v1alpha1.FunctionRunFailed, v1alpha1.ReasonRunFailed, "its run "+status.RunID+" is no longer kept (past the runs' retention, or its store was emptied)")
		return ctrl.Result{}, nil
	case runclient.Code(err) == http.StatusNotImplemented:
		status.Error = "the activators keep no runs: they need a database (--database-url)"
		return ctrl.Result{RequeueAfter: r.opts.MaxPoll}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("read run %s of %s/%s: %w", id, fr.Namespace, fr.Name, err)
	}
	status.Phase, status.Attempts, status.Error = phaseOf(run.State), int32(run.Attempts), run.Error
	status.StartedAt, status.CompletedAt = metaTime(run.StartedAt), metaTime(run.CompletedAt)
	if !run.State.Ended() {
		return ctrl.Result{RequeueAfter: r.pollAfter(fr)}, nil
	}
	if run.Status > 0 {
		res, err := r.result(cctx, run)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("read the answer of run %s of %s/%s: %w", id, fr.Namespace, fr.Name, err)
		}
		status.Result = res
	}
	reason := map[runs.State]string{runs.Succeeded: v1alpha1.ReasonSucceeded, runs.Failed: v1alpha1.ReasonRunFailed,
		runs.Cancelled: v1alpha1.ReasonCancelled, runs.Expired: v1alpha1.ReasonExpired}[run.State]
	end(status, status.Phase, reason, endMessage(run))
	return ctrl.Result{}, nil
}

// pollAfter is when to read fr's run next: every Poll while it is young,
// then every tenth of its age, up to MaxPoll.
func (r *Reconciler) pollAfter(fr *v1alpha1.FunctionRun) time.Duration {
	return min(max(r.opts.Poll, time.Since(fr.CreationTimestamp.Time)/10), r.opts.MaxPoll)
}

// result is run's answer as a status holds it.
func (r *Reconciler) result(ctx context.Context, run runs.Run) (*v1alpha1.FunctionRunResult, error) {
	resp, err := r.opts.Runs.Result(ctx, run)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, v1alpha1.MaxFunctionRunResultBytes+1))
	if err != nil {
		return nil, err
	}
	res := &v1alpha1.FunctionRunResult{Status: int32(resp.StatusCode), ContentType: resp.Header.Get("Content-Type"),
		Size: max(run.ResultSize, int64(len(body))), Truncated: run.ResultTruncated}
	if len(body) > v1alpha1.MaxFunctionRunResultBytes {
		body, res.Truncated = body[:v1alpha1.MaxFunctionRunResultBytes], true
	}
	for i := 0; res.Truncated && i < utf8.UTFMax-1 && !utf8.Valid(body); i++ {
		body = body[:len(body)-1] // a cut may have split the last character
	}
	if utf8.Valid(body) {
		res.Body = string(body)
	} else {
		res.Binary = true
	}
	return res, nil
}

func endMessage(run runs.Run) string {
	msg := fmt.Sprintf("run %s %s after %d attempt(s)", run.ID, run.State, run.Attempts)
	if run.Error != "" {
		msg += ": " + run.Error
	}
	return msg
}

// end ends status in phase, its condition (Complete once succeeded,
// Failed otherwise) saying why.
func end(status *v1alpha1.FunctionRunStatus, phase v1alpha1.FunctionRunPhase, reason, msg string) {
	status.Phase = phase
	if status.CompletedAt == nil {
		status.CompletedAt = metaTime(new(time.Now()))
	}
	c := metav1.Condition{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg}
	if phase == v1alpha1.FunctionRunSucceeded {
		c.Type = v1alpha1.ConditionComplete
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

// writeStatus writes status with a merge patch, not an update: this
// reconciler is its only writer, and a change of the object meanwhile (a
// deletion begun) must not lose a run id just learnt.
func (r *Reconciler) writeStatus(ctx context.Context, fr *v1alpha1.FunctionRun, status *v1alpha1.FunctionRunStatus) error {
	if equality.Semantic.DeepEqual(&fr.Status, status) {
		return nil
	}
	ended := status.Phase.Ended() && !fr.Status.Phase.Ended()
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Status = *status
	if err := r.client.Status().Patch(ctx, fr, patch); err != nil {
		return fmt.Errorf("write the status of %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	if ended && len(status.Conditions) > 0 {
		kind := corev1.EventTypeNormal
		if status.Phase != v1alpha1.FunctionRunSucceeded {
			kind = corev1.EventTypeWarning
		}
		r.events.Eventf(fr, nil, kind, string(status.Phase), "Run", "%s", status.Conditions[len(status.Conditions)-1].Message)
	}
	return nil
}

// release takes the finalizer off fr: its run ended, there is nothing to
// cancel.
func (r *Reconciler) release(ctx context.Context, fr *v1alpha1.FunctionRun) error {
	if !controllerutil.ContainsFinalizer(fr, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(fr.DeepCopy())
	controllerutil.RemoveFinalizer(fr, Finalizer)
	if err := r.client.Patch(ctx, fr, patch); err != nil {
		return fmt.Errorf("remove the finalizer of %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	return nil
}

// finalize cancels the run of a FunctionRun being deleted, then lets it
// go. A run that cannot be cancelled (the activators are out of reach)
// goes on: the FunctionRun is not held for it.
func (r *Reconciler) finalize(ctx context.Context, fr *v1alpha1.FunctionRun) error {
	if fr.Status.RunID != "" && !fr.Status.Phase.Ended() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if _, err := r.opts.Runs.Cancel(cctx, runs.ID(fr.Status.RunID)); err != nil {
			ctrl.LoggerFrom(ctx).Info("the run of a FunctionRun deleted could not be cancelled: it goes on", "run", fr.Status.RunID, "err", err.Error())
		}
	}
	return r.release(ctx, fr)
}

// expire deletes an ended FunctionRun once its ttlSecondsAfterFinished
// passed, or asks to be called then.
func (r *Reconciler) expire(ctx context.Context, fr *v1alpha1.FunctionRun) (ctrl.Result, error) {
	ttl := fr.Spec.TTLSecondsAfterFinished
	if ttl == nil || fr.Status.CompletedAt == nil {
		return ctrl.Result{}, nil
	}
	if left := time.Until(fr.Status.CompletedAt.Add(time.Duration(*ttl) * time.Second)); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	err := r.client.Delete(ctx, fr, client.Preconditions{UID: &fr.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

func phaseOf(s runs.State) v1alpha1.FunctionRunPhase {
	switch s {
	case runs.Queued:
		return v1alpha1.FunctionRunQueued
	case runs.Running:
		return v1alpha1.FunctionRunRunning
	case runs.Succeeded:
		return v1alpha1.FunctionRunSucceeded
	case runs.Failed:
		return v1alpha1.FunctionRunFailed
	case runs.Cancelled:
		return v1alpha1.FunctionRunCancelled
	case runs.Expired:
		return v1alpha1.FunctionRunExpired
	}
	return v1alpha1.FunctionRunPending
}

// metaTime is t as a status keeps it: to the second, as it is read back.
func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
