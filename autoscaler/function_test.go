package autoscaler

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler/kpa"
)

func TestTargetFor(t *testing.T) {
	zero := int32(0)
	tests := []struct {
		name     string
		scale    v1alpha1.Scale
		triggers []v1alpha1.Trigger
		want     Target
	}{
		{"defaults", v1alpha1.Scale{}, nil, Target{Namespace: "default", Name: "f", RunConcurrency: v1alpha1.DefaultAsyncConcurrency, Spec: kpa.Spec{
			Min: 0, Max: v1alpha1.DefaultMaxScale, Initial: 1, Target: float64(v1alpha1.DefaultTarget) * 0.7,
			StableWindow: 60 * time.Second, ScaleToZeroGrace: 30 * time.Second}}},
		{"all set, rps", v1alpha1.Scale{Min: 2, Max: 5, Initial: &zero, Target: 10, TargetUtilization: 50,
			Metric: v1alpha1.MetricRPS, Window: &metav1.Duration{Duration: 20 * time.Second},
			ScaleToZeroGracePeriod: &metav1.Duration{Duration: time.Second}},
			[]v1alpha1.Trigger{{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}},
				{Name: "orders", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "orders", TargetQueueLength: 3, ActivationQueueLength: 2}},
				{Name: "off", Enabled: ptr.To(false), RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "off"}}},
			Target{Queues: []Queue{{Name: "orders", Target: 3, Activation: 2}}, Namespace: "default", Name: "f", Metric: MetricRPS,
				RunConcurrency: v1alpha1.DefaultAsyncConcurrency, Spec: kpa.Spec{
					Min: 2, Max: 5, Initial: 0, Target: 5, StableWindow: 20 * time.Second, ScaleToZeroGrace: time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f"},
				Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Scale: tt.scale, Triggers: tt.triggers}}
			fn.Default()
			if got := TargetFor(fn); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("TargetFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}
