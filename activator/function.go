package activator

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/runs"
)

// RouteSpecFor is what the activator needs of a defaulted Function, the
// same on Kubernetes and in the local platform.
func RouteSpecFor(fn *v1alpha1.Function) RouteSpec {
	http, disabled := false, ""
	a := &fn.Spec.Async
	triggers := make(map[string]Trigger, len(fn.Spec.Triggers))
	for _, t := range fn.Spec.Triggers {
		triggers[t.Name] = Trigger{Cron: t.Cron != nil, Enabled: t.IsEnabled()}
		switch {
		case t.HTTP == nil:
		case t.IsEnabled():
			http = true
		default:
			disabled = t.Name
		}
	}
	return RouteSpec{
		Namespace: fn.Namespace, Name: fn.Name, HTTP: http, DisabledHTTP: disabled,
		Concurrency: int(fn.Spec.Concurrency),
		Timeout:     time.Duration(fn.Spec.TimeoutSeconds) * time.Second,
		IdleTimeout: time.Duration(fn.Spec.IdleTimeoutSeconds) * time.Second,
		MaxDuration: time.Duration(fn.Spec.EffectiveMaxDurationSeconds()) * time.Second,
		Triggers:    triggers,
		Runs: runs.Policy{MaxAttempts: int(a.MaxAttempts), MinBackoff: duration(a.MinBackoff), MaxBackoff: duration(a.MaxBackoff),
			MaxAge: duration(a.MaxAge), Concurrency: int(a.Concurrency),
			OnSuccess: runTarget(a.OnSuccess), OnFailure: runTarget(a.OnFailure)},
	}
}

// runTarget is where t sends an ended run's answer: nowhere when nil.
func runTarget(t *v1alpha1.RunTarget) runs.Target {
	if t == nil {
		return runs.Target{}
	}
	return runs.Target{Function: t.Function, Queue: t.Queue}
}

// duration is d's, 0 when unset.
func duration(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
