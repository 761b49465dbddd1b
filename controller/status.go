package controller

import (
	"fmt"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
)

// observed is what a reconcile saw of a valid Function's objects.
type observed struct {
	deployment *appsv1.Deployment
	// scaledObject is the live ScaledObject, nil without one.
	scaledObject             *kedav1alpha1.ScaledObject
	needsKEDA, kedaInstalled bool
	// instances is ConditionInstancesReady, from the function's pods.
	instances metav1.Condition
}

// apply writes the observations into status: the replica counts, the URL
// and the four conditions.
func (o observed) apply(status *v1alpha1.FunctionStatus, fn *v1alpha1.Function, activatorHost string, generation int64) {
	d := o.deployment
	status.Replicas = d.Status.Replicas
	status.ReadyReplicas = d.Status.ReadyReplicas
	status.DesiredReplicas = ptr.Deref(d.Spec.Replicas, 1)
	status.URL = ""
	for _, t := range fn.Spec.Triggers {
		if t.HTTP != nil && t.IsEnabled() {
			status.URL = fmt.Sprintf("http://%s/fn/%s/%s", activatorHost, fn.Namespace, fn.Name)
		}
	}
	deployment, scaling := deploymentCondition(d), o.scalingCondition()
	setCondition(status, generation, deployment)
	setCondition(status, generation, scaling)
	setCondition(status, generation, o.instances)
	setCondition(status, generation, readyFrom(deployment, scaling, o.instances))
}

// deploymentCondition says whether the function's instances are available,
// from the Deployment controller's conditions. While instances are added
// (a rollout, a scale from zero) it is Unknown, not False: False means the
// rollout failed.
func deploymentCondition(d *appsv1.Deployment) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDeploymentReady, Status: metav1.ConditionUnknown,
		Reason: v1alpha1.ReasonRolloutPending, Message: "waiting for the Deployment controller to roll out the latest spec"}
	if d.Status.ObservedGeneration < d.Generation {
		return c
	}
	available := deploymentStatus(d, appsv1.DeploymentAvailable)
	if f := deploymentStatus(d, appsv1.DeploymentReplicaFailure); f != nil && f.Status == corev1.ConditionTrue {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonReplicaFailure, f.Message
	} else if p := deploymentStatus(d, appsv1.DeploymentProgressing); p != nil && p.Status == corev1.ConditionFalse {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonProgressDeadlineExceeded, p.Message
	} else if available != nil && available.Status == corev1.ConditionTrue {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAvailable
		c.Message = fmt.Sprintf("%d of %d instances ready", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 1))
	} else if available != nil {
		c.Reason, c.Message = v1alpha1.ReasonScaling, available.Message
	}
	return c
}

func deploymentStatus(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// scalingCondition says whether whoever writes the replicas is in place.
func (o observed) scalingCondition() metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionScalingReady}
	switch {
	case !o.needsKEDA:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonAutoscaler, "the sless autoscaler writes replicas"
	case !o.kedaInstalled:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonKEDANotInstalled
		c.Message = "KEDA is not installed; functions with RabbitMQ triggers or scale.owner keda need it"
	default:
		ready := kedaReady(o.scaledObject)
		switch ready.Status {
		case metav1.ConditionTrue:
			c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonScaledObjectReady
			c.Message = "KEDA writes replicas through ScaledObject " + o.scaledObject.Name
		case metav1.ConditionFalse:
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonScaledObjectNotReady, ready.Message
		default:
			c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.ReasonWaitingForKEDA
			c.Message = "waiting for KEDA to take ScaledObject " + o.scaledObject.Name
		}
	}
	return c
}

// kedaReady is KEDA's Ready condition of a ScaledObject, empty when KEDA
// has not set it.
func kedaReady(so *kedav1alpha1.ScaledObject) kedav1alpha1.Condition {
	for _, c := range so.Status.Conditions {
		if c.Type == kedav1alpha1.ConditionReady {
			return c
		}
	}
	return kedav1alpha1.Condition{}
}

// readyFrom sums the detail conditions up: False when one is False, Unknown
// when one is Unknown, else True; the first such condition gives the
// reason and message.
func readyFrom(details ...metav1.Condition) metav1.Condition {
	for _, s := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionUnknown} {
		for _, d := range details {
			if d.Status == s {
				return metav1.Condition{Type: v1alpha1.ConditionReady, Status: s, Reason: d.Reason, Message: d.Message}
			}
		}
	}
	return metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady, Message: details[0].Message}
}

func invalid(msg string) metav1.Condition {
	return notReady(v1alpha1.ReasonInvalidSpec, msg)
}

func notReady(reason, msg string) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

// setCondition sets a condition, keeping its transition time unless its
// status changes.
func setCondition(status *v1alpha1.FunctionStatus, generation int64, c metav1.Condition) {
	c.ObservedGeneration = generation
	meta.SetStatusCondition(&status.Conditions, c)
}

// readyEvent records an event when the Function stops being ready or is
// ready again. Unknown (instances being added) records nothing, so cold
// starts make no events.
func (r *FunctionReconciler) readyEvent(fn *v1alpha1.Function, status *v1alpha1.FunctionStatus) {
	was := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady)
	now := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady)
	switch {
	case now == nil:
	case now.Status == metav1.ConditionFalse && (was == nil || was.Status != now.Status || was.Reason != now.Reason):
		r.events.Eventf(fn, nil, corev1.EventTypeWarning, now.Reason, "Reconcile", "%s", now.Message)
	case now.Status == metav1.ConditionTrue && (was == nil || was.Status == metav1.ConditionFalse):
		r.events.Eventf(fn, nil, corev1.EventTypeNormal, now.Reason, "Reconcile", "%s", now.Message)
	}
}
