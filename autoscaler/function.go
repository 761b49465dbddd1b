package autoscaler

import (
	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler/kpa"
)

// FunctionFor is what the autoscaler needs of a defaulted, valid Function:
// the same translation on Kubernetes and in the local platform, so both
// scale a Function alike.
func FunctionFor(fn *v1alpha1.Function) Function {
	s := &fn.Spec.Scale
	out := Function{
		Namespace: fn.Namespace,
		Name:      fn.Name,
		Spec: kpa.Spec{
			Min: s.Min, Max: s.Max, Initial: s.InitialReplicas(),
			Target: float64(s.Target) * float64(s.TargetUtilization) / 100,
		},
	}
	if s.Window != nil {
		out.Spec.StableWindow = s.Window.Duration
	}
	if s.ScaleToZeroGracePeriod != nil {
		out.Spec.ScaleToZeroGrace = s.ScaleToZeroGracePeriod.Duration
	}
	if s.Metric == v1alpha1.MetricRPS {
		out.Metric = MetricRPS
	}
	for _, t := range fn.Spec.Triggers {
		if q := t.RabbitMQ; q != nil && t.IsEnabled() {
			broker := ""
			if q.ConnectionSecret != "" {
				broker = fn.Namespace + "/" + q.ConnectionSecret
			}
			out.Queues = append(out.Queues, Queue{Broker: broker, Name: q.Queue,
				Target: int64(q.TargetQueueLength), Activation: int64(q.ActivationQueueLength)})
		}
	}
	return out
}
