// Package kubeadmin is the admin API's backend on Kubernetes, served by the
// activator: it reads Functions from the activator's watch and their
// status from the controller, and makes a console action a patch of the
// Function, so the change is the cluster's, as kubectl would make it.
package kubeadmin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/timeline"
)

// Backend serves the admin API from the cluster (an adminapi.Backend).
type Backend struct {
	// Reader reads Functions for the views: the activator's watch.
	Reader client.Reader
	// Client reads Functions for the actions, from the API server, so
	// that an action sees the one before it even when the watch lags,
	// and patches them: the activator's role allows get and patch.
	Client client.Client
	// Timeline is this activator's own, which Sample feeds.
	Timeline *timeline.Timeline
	// View, when set, is the timeline the views read: every activator's
	// (Whole.View); Timeline without it.
	View func(context.Context) *timeline.Timeline
	// Invoke is the base URL of the activator's invocation port, as this
	// process reaches it.
	Invoke string
	// Waiting counts a function's requests waiting at this activator.
	Waiting func(namespace, name string) int
	// Scaling, when set, reads what the autoscaler knows of every
	// function: panic mode, queue depth, and the requests waiting at
	// every activator.
	Scaling func(context.Context) ([]wire.Scaling, error)
	// Log says when Scaling fails.
	Log *slog.Logger
}

// views is what a view of functions is made from at one moment.
type views struct {
	now      time.Time
	timeline *timeline.Timeline
	scaling  map[types.NamespacedName]wire.Scaling
}

// views reads the timeline and the autoscaler's view once for a view of
// functions; without the autoscaler's, the views show this activator's
// requests waiting, and no panic mode or queue depth.
func (b *Backend) views(ctx context.Context) views {
	v := views{now: time.Now(), timeline: b.Timeline}
	if b.View != nil {
		v.timeline = b.View(ctx)
	}
	if b.Scaling == nil {
		return v
	}
	all, err := b.Scaling(ctx)
	if err != nil {
		b.Log.Warn("the admin view leaves out the autoscaler's", "err", err)
		return v
	}
	v.scaling = make(map[types.NamespacedName]wire.Scaling, len(all))
	for _, s := range all {
		v.scaling[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	return v
}

// Functions lists every Function, sorted by namespace and name.
func (b *Backend) Functions(ctx context.Context) ([]adminapi.Status, error) {
	var list v1alpha1.FunctionList
	if err := b.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list functions: %w", err)
	}
	out := make([]adminapi.Status, 0, len(list.Items))
	v := b.views(ctx)
	for i := range list.Items {
		out = append(out, b.status(&list.Items[i], v))
	}
	slices.SortFunc(out, func(x, y adminapi.Status) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	return out, nil
}

// read is the Function as r has it.
func read(ctx context.Context, r client.Reader, namespace, name string) (*v1alpha1.Function, error) {
	fn := &v1alpha1.Function{}
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, fn)
	switch {
	case apierrors.IsNotFound(err):
		return nil, adminapi.Unknown(namespace, name)
	case err != nil:
		return nil, fmt.Errorf("get function %s/%s: %w", namespace, name, err)
	}
	return fn, nil
}

// get is the Function from r with its defaults, as the platform runs it.
func get(ctx context.Context, r client.Reader, namespace, name string) (*v1alpha1.Function, error) {
	fn, err := read(ctx, r, namespace, name)
	if err == nil {
		fn.Default()
	}
	return fn, err
}

// Function reports one Function.
func (b *Backend) Function(ctx context.Context, namespace, name string) (adminapi.Status, error) {
	fn, err := get(ctx, b.Reader, namespace, name)
	if err != nil {
		return adminapi.Status{}, err
	}
	return b.status(fn, b.views(ctx)), nil
}

// SetTrigger patches the trigger's enabled field; the patch tests the
// trigger's place, so a concurrent edit that moved it fails rather than
// change another trigger.
func (b *Backend) SetTrigger(ctx context.Context, namespace, name, trigger string, enabled bool) (adminapi.Status, error) {
	fn, err := get(ctx, b.Client, namespace, name)
	if err != nil {
		return adminapi.Status{}, err
	}
	i := slices.IndexFunc(fn.Spec.Triggers, func(t v1alpha1.Trigger) bool { return t.Name == trigger })
	if i < 0 {
		return adminapi.Status{}, adminapi.NotFound("%s/%s has no trigger %q", namespace, name, trigger)
	}
	path := fmt.Sprintf("/spec/triggers/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": path + "/name", "value": trigger},
		{"op": "add", "path": path + "/enabled", "value": enabled},
	}
	return b.patch(ctx, fn, types.JSONPatchType, ops)
}

// SetScale merges min and max into the Function's scale.
func (b *Backend) SetScale(ctx context.Context, namespace, name string, s adminapi.Scale) (adminapi.Status, error) {
	fn, err := get(ctx, b.Client, namespace, name)
	if err != nil {
		return adminapi.Status{}, err
	}
	if err := s.Check(fn.Spec.Scale); err != nil {
		return adminapi.Status{}, err
	}
	return b.patch(ctx, fn, types.MergePatchType, map[string]any{"spec": map[string]any{"scale": s}})
}

// patch applies a patch to fn; the API server's refusal (its validation)
// is the caller's error.
func (b *Backend) patch(ctx context.Context, fn *v1alpha1.Function, pt types.PatchType, body any) (adminapi.Status, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return adminapi.Status{}, err
	}
	err = b.Client.Patch(ctx, fn, client.RawPatch(pt, raw))
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsConflict(err):
		return adminapi.Status{}, adminapi.BadInput("the API server refused the change: %v", err)
	case apierrors.IsNotFound(err):
		return adminapi.Status{}, adminapi.Unknown(fn.Namespace, fn.Name)
	case err != nil:
		return adminapi.Status{}, fmt.Errorf("patch function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	fn.Default()
	return b.status(fn, b.views(ctx)), nil
}

// Manifest is the Function as the API server has it, without the fields
// the server manages.
func (b *Backend) Manifest(ctx context.Context, namespace, name string) (adminapi.Manifest, error) {
	fn, err := read(ctx, b.Reader, namespace, name)
	if err != nil {
		return adminapi.Manifest{}, err
	}
	fn.ManagedFields = nil
	fn.APIVersion, fn.Kind = v1alpha1.GroupVersion.String(), "Function"
	y, err := yaml.Marshal(fn)
	if err != nil {
		return adminapi.Manifest{}, fmt.Errorf("manifest of %s/%s: %w", namespace, name, err)
	}
	return adminapi.Manifest{YAML: string(y)}, nil
}

// Target is the function's route on this activator.
func (b *Backend) Target(ctx context.Context, namespace, name string) (adminapi.Target, error) {
	fn, err := get(ctx, b.Reader, namespace, name)
	if err != nil {
		return adminapi.Target{}, err
	}
	return adminapi.Target{URL: b.Invoke + "/fn/" + namespace + "/" + name,
		Timeout: time.Duration(fn.Spec.TimeoutSeconds) * time.Second}, nil
}

// status is fn as the admin API shows it, from its spec and the status the
// controller writes.
func (b *Backend) status(fn *v1alpha1.Function, v views) adminapi.Status {
	s := fn.Status
	st := adminapi.Status{Namespace: fn.Namespace, Name: fn.Name, Runtime: string(fn.Spec.Runtime), URL: s.URL,
		Desired: int(s.DesiredReplicas), Ready: int(s.ReadyReplicas), Starting: max(int(s.Replicas-s.ReadyReplicas), 0),
		Spec: fn.Spec}
	st.State, st.Reason, st.Error = state(fn)
	st.Triggers = triggers(fn)
	if v.timeline != nil {
		st.Stats, _ = v.timeline.Stats(v.now, fn.Namespace, fn.Name, adminapi.StatsWindow)
	}
	if b.Waiting != nil {
		st.Buffered = b.Waiting(fn.Namespace, fn.Name)
	}
	if s, ok := v.scaling[types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}]; ok {
		// The autoscaler's sum is up to a second old: never below what
		// waits here now.
		st.Buffered = max(st.Buffered, s.Buffered)
		st.Panic, st.QueueDepth = s.Panic, s.QueueDepth
	}
	return st
}

// state maps the controller's conditions and counts onto the states sless
// dev reports: failed (the controller refuses it), crashing (its pods
// cannot start, or its Deployment fails), ready, starting or idle; reason
// is the InstancesReady condition's when its pods say why.
func state(fn *v1alpha1.Function) (state adminapi.State, reason, cause string) {
	s := fn.Status
	ready := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
	deploy := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionDeploymentReady)
	reason, cause, failing := s.InstancesFailing()
	switch {
	case ready != nil && ready.Status == metav1.ConditionFalse && (ready.Reason == v1alpha1.ReasonInvalidSpec || ready.Reason == v1alpha1.ReasonResourceConflict):
		return adminapi.StateFailed, "", ready.Message
	case s.ReadyReplicas == 0 && failing:
		return adminapi.StateCrashing, reason, cause
	case s.ReadyReplicas == 0 && deploy != nil && deploy.Status == metav1.ConditionFalse &&
		(deploy.Reason == v1alpha1.ReasonReplicaFailure || deploy.Reason == v1alpha1.ReasonProgressDeadlineExceeded):
		return adminapi.StateCrashing, "", deploy.Message
	case s.ReadyReplicas > 0:
		return adminapi.StateReady, "", ""
	case s.DesiredReplicas > 0 || s.Replicas > 0 || ready == nil:
		return adminapi.StateStarting, "", ""
	}
	return adminapi.StateIdle, "", ""
}

// triggers reports fn's triggers: a RabbitMQ trigger fails when the
// controller's last check of it did.
func triggers(fn *v1alpha1.Function) []adminapi.TriggerStatus {
	out := make([]adminapi.TriggerStatus, 0, len(fn.Spec.Triggers))
	for _, t := range fn.Spec.Triggers {
		ts := adminapi.NewTriggerStatus(t)
		if ts.State == adminapi.TriggerWaiting {
			if fn.Status.ReadyReplicas > 0 {
				ts.State = adminapi.TriggerConsuming
			}
			if msg, ok := fn.Status.TriggerFailing(t.Name); ok {
				ts.State, ts.Error = adminapi.TriggerFailing, msg
			}
		}
		out = append(out, ts)
	}
	return out
}

// Sample records every Function's instances and the requests Waiting at
// this activator in the timeline each period, until ctx ends.
func (b *Backend) Sample(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		var list v1alpha1.FunctionList
		if err := b.Reader.List(ctx, &list); err == nil {
			now := time.Now()
			exists := make(map[types.NamespacedName]bool, len(list.Items))
			for _, fn := range list.Items {
				exists[types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}] = true
				g := timeline.Gauges{Desired: int(fn.Status.DesiredReplicas), Ready: int(fn.Status.ReadyReplicas)}
				if b.Waiting != nil {
					g.Buffered = b.Waiting(fn.Namespace, fn.Name)
				}
				b.Timeline.Sample(now, fn.Namespace, fn.Name, g)
			}
			b.Timeline.Retain(func(namespace, name string) bool {
				return exists[types.NamespacedName{Namespace: namespace, Name: name}]
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
