package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Function's lifecycle as its status tells it: the condition types, the
// reasons each may give (docs/controller.md), and the readings of them the
// activator and the admin API share. The controller writes them; nothing
// else needs the controller to read them.

// Condition types reported in FunctionStatus.Conditions.
const (
	// ConditionReady is true when the function can serve invocations.
	ConditionReady = "Ready"
	// ConditionDeploymentReady is true when its instances are available.
	ConditionDeploymentReady = "DeploymentReady"
	// ConditionScalingReady is true when its scaler is in place.
	ConditionScalingReady = "ScalingReady"
	// ConditionTriggersReady is false while a RabbitMQ trigger cannot be
	// consumed (its Secret, its URL, the broker's credentials or its
	// queue), naming the trigger. It does not make Ready false: the other
	// triggers work. Absent without RabbitMQ triggers.
	ConditionTriggersReady = "TriggersReady"
	// ConditionInstancesReady is false while the function's instances
	// cannot serve, as their pods show: an image that cannot be pulled,
	// a container that crashes or cannot be created, readiness failing
	// for long. Its reason is one of the Reason* below, its message the
	// cause, with the last lines of a crashed container's output.
	ConditionInstancesReady = "InstancesReady"
)

// Reasons of ConditionInstancesReady. sless dev reports Crashing and
// ReadinessFailing of its local instances too.
const (
	ReasonInstancesHealthy = "Healthy"
	ReasonImagePullFailed  = "ImagePullFailed"
	ReasonCrashing         = "Crashing"
	ReasonContainerFailed  = "ContainerFailed"
	ReasonReadinessFailing = "ReadinessFailing"
)

// Reasons of ConditionReady.
const (
	ReasonReady            = "Ready"
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonResourceConflict = "ResourceConflict"
)

// Reasons of ConditionDeploymentReady.
const (
	ReasonAvailable                = "Available"
	ReasonRolloutPending           = "RolloutPending"
	ReasonScaling                  = "Scaling"
	ReasonReplicaFailure           = "ReplicaFailure"
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// Reasons of ConditionScalingReady.
const (
	ReasonAutoscaler           = "Autoscaler"
	ReasonScaledObjectReady    = "ScaledObjectReady"
	ReasonScaledObjectNotReady = "ScaledObjectNotReady"
	ReasonWaitingForKEDA       = "WaitingForKEDA"
	ReasonKEDANotInstalled     = "KEDANotInstalled"
)

// Reasons of ConditionTriggersReady.
const (
	ReasonTriggersReachable = "Reachable"
	ReasonTriggerFailing    = "TriggerFailing"
)

// ReadinessGrace is how long a running instance may fail its readiness
// check before its function is reported ReadinessFailing: a runtime
// loading a large handler takes seconds, one that never answers /healthz
// is broken.
const ReadinessGrace = 60 * time.Second

// InstancesFailing returns why the function's instances cannot serve,
// when its status says they cannot: the activator then answers 503 with
// the cause at once rather than hold requests to their timeout. reason is
// one of the Reason* of ConditionInstancesReady.
func (s *FunctionStatus) InstancesFailing() (reason, cause string, failing bool) {
	for _, c := range s.Conditions {
		if c.Type == ConditionInstancesReady && c.Status == metav1.ConditionFalse {
			return c.Reason, c.Message, true
		}
	}
	return "", "", false
}

// TriggerFailing returns why the controller's last check of the trigger
// name failed, when it did.
func (s *FunctionStatus) TriggerFailing(name string) (cause string, failing bool) {
	for _, t := range s.Triggers {
		if t.Name == name && !t.Ready {
			return t.Message, true
		}
	}
	return "", false
}
