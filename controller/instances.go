package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
)

// maxCauseBytes bounds a condition's message: the last lines of a crashed
// container's output are in it, and a status is not a log.
const maxCauseBytes = 1024

// The waiting reasons of a container (the kubelet's) that mean it will not
// start without a change: its image, its configuration, its runtime.
var (
	pullFailures   = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true}
	createFailures = map[string]bool{"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "PreCreateHookError": true, "PreStartHookError": true}
)

// podsOfFunction maps a pod to the Function it is an instance of, by the
// labels the controller puts on its pod template.
func podsOfFunction(_ context.Context, pod client.Object) []reconcile.Request {
	name := pod.GetLabels()[wire.FunctionLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.GetNamespace(), Name: name}}}
}

// instancesCondition reads the function's pods: False, with the cause, when
// an instance cannot serve and will not without a change (the first such
// pod, by name, gives it); True otherwise. recheck is when a pod that only
// fails its readiness so far would pass v1alpha1.ReadinessGrace, 0 when none does.
func instancesCondition(pods []corev1.Pod, now time.Time) (c metav1.Condition, recheck time.Duration) {
	c = metav1.Condition{Type: v1alpha1.ConditionInstancesReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonInstancesHealthy, Message: "no instance is failing"}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || podReady(p) {
			continue
		}
		if reason, msg := podFailure(p); reason != "" {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, truncate(msg)
			return c, 0
		}
		if since, ok := unreadySince(p); ok {
			if wait := v1alpha1.ReadinessGrace - now.Sub(since); wait > 0 {
				if recheck == 0 || wait < recheck {
					recheck = wait
				}
				continue
			}
			c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonReadinessFailing
			c.Message = fmt.Sprintf("instance %s has been running without passing its readiness check since %s", p.Name, since.UTC().Format(time.RFC3339))
			return c, 0
		}
	}
	return c, recheck
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure is why a pod's containers cannot run, as the kubelet reports
// it: its reason and a message naming the container.
func podFailure(p *corev1.Pod) (reason, msg string) {
	for _, cs := range p.Status.ContainerStatuses {
		w := cs.State.Waiting
		switch {
		case w != nil && pullFailures[w.Reason]:
			return v1alpha1.ReasonImagePullFailed, fmt.Sprintf("container %s: image %s cannot be pulled: %s: %s", cs.Name, cs.Image, w.Reason, w.Message)
		case w != nil && createFailures[w.Reason]:
			return v1alpha1.ReasonContainerFailed, fmt.Sprintf("container %s cannot start: %s: %s", cs.Name, w.Reason, w.Message)
		case cs.RestartCount > 0 && cs.LastTerminationState.Terminated != nil && !cs.Ready:
			// Crashed, and not ready since: back-off or a new crash.
			t := cs.LastTerminationState.Terminated
			msg := fmt.Sprintf("container %s crashed %d times, last with exit code %d", cs.Name, cs.RestartCount, t.ExitCode)
			if t.Reason != "" && t.Reason != "Error" {
				msg += " (" + t.Reason + ")"
			}
			if out := strings.TrimSpace(t.Message); out != "" {
				msg += "; its last output: " + tail(out)
			}
			return v1alpha1.ReasonCrashing, msg
		}
	}
	return "", ""
}

// unreadySince is when a running pod whose containers all started became
// unready: an instance whose function does not answer its health check.
func unreadySince(p *corev1.Pod) (time.Time, bool) {
	if p.Status.Phase != corev1.PodRunning {
		return time.Time{}, false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return time.Time{}, false
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// tail keeps the end of a crashed container's output, where the cause
// is, without its stack frames (Node's "    at ...", Python's
// '  File "...", line ...'): the error's own line is what says why, and
// frames would push it out.
func tail(out string) string {
	var kept []string
	for line := range strings.Lines(out) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "at ") || strings.HasPrefix(trimmed, "File \"") {
			continue
		}
		kept = append(kept, strings.TrimRight(line, "\n"))
	}
	out = strings.Join(kept, "\n")
	const keep = maxCauseBytes * 3 / 4
	if len(out) <= keep {
		return out
	}
	return "…" + out[len(out)-keep:]
}

func truncate(msg string) string {
	if len(msg) <= maxCauseBytes {
		return msg
	}
	return msg[:maxCauseBytes-len("…")] + "…"
}

// observeInstances reads the function's pods into o.instances and returns
// when to look again (0: at the next event).
func (r *FunctionReconciler) observeInstances(ctx context.Context, fn *v1alpha1.Function, o *observed) (time.Duration, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(fn.Namespace), client.MatchingLabels{wire.FunctionLabel: fn.Name}); err != nil {
		return 0, fmt.Errorf("pods of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	var recheck time.Duration
	o.instances, recheck = instancesCondition(pods.Items, time.Now())
	return recheck, nil
}
