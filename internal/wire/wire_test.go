package wire

import (
	"reflect"
	"testing"

	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
)

// RabbitMQTriggers lists the enabled RabbitMQ triggers, defaulted, each with the
// variable of its URL.
func TestRabbitMQTriggers(t *testing.T) {
	fn := &v1alpha1.Function{Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Triggers: []v1alpha1.Trigger{
		{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}},
		{Name: "orders-new", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "orders", Prefetch: 3, MaxRetries: ptr.To[int32](0), DeadLetterQueue: "dlq"}},
		{Name: "audit", RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "audit", QueueType: v1alpha1.QueueQuorum}},
		{Name: "off", Enabled: ptr.To(false), RabbitMQ: &v1alpha1.RabbitMQTrigger{Queue: "off"}},
	}}}
	fn.Default()
	want := []RabbitMQTrigger{
		{Name: "orders-new", Queue: "orders", URLEnv: "SLESS_AMQP_URL_ORDERS_NEW", Prefetch: 3, DeadLetterQueue: "dlq"},
		{Name: "audit", Queue: "audit", URLEnv: "SLESS_AMQP_URL_AUDIT", Prefetch: v1alpha1.DefaultPrefetch, MaxRetries: v1alpha1.DefaultMaxRetries, QueueType: v1alpha1.QueueQuorum},
	}
	if got := RabbitMQTriggers(fn.Spec); !reflect.DeepEqual(got, want) {
		t.Errorf("RabbitMQTriggers = %+v\nwant %+v", got, want)
	}
}
