package v1alpha1

import "testing"

func TestInitialReplicas(t *testing.T) {
	tests := []struct {
		name  string
		scale Scale
		want  int32
	}{
		{"unset starts one", Scale{Min: 0, Max: 10}, 1},
		{"unset starts min", Scale{Min: 3, Max: 10}, 3},
		{"explicit zero", Scale{Min: 0, Max: 10, Initial: ptr(int32(0))}, 0},
		{"explicit", Scale{Min: 1, Max: 10, Initial: ptr(int32(4))}, 4},
	}
	for _, tt := range tests {
		if got := tt.scale.InitialReplicas(); got != tt.want {
			t.Errorf("%s: InitialReplicas() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestEffectiveHandler(t *testing.T) {
	tests := []struct {
		spec FunctionSpec
		want string
	}{
		{FunctionSpec{Runtime: RuntimeGo}, "Handle"},
		{FunctionSpec{Runtime: RuntimePython}, "main.handle"},
		{FunctionSpec{Runtime: RuntimeNode}, "index.handle"},
		{FunctionSpec{Runtime: RuntimeNode, Handler: "app.run"}, "app.run"},
	}
	for _, tt := range tests {
		if got := tt.spec.EffectiveHandler(); got != tt.want {
			t.Errorf("EffectiveHandler(%+v) = %q, want %q", tt.spec, got, tt.want)
		}
	}
}

func TestDefaultKeepsExplicitValues(t *testing.T) {
	f := validFunction()
	zero := int32(0)
	f.Spec.Triggers[2].RabbitMQ.MaxRetries = &zero
	f.Spec.Scale.ScaleToZeroGracePeriod.Duration = 0
	f.Default()
	if *f.Spec.Triggers[2].RabbitMQ.MaxRetries != 0 || f.Spec.Scale.ScaleToZeroGracePeriod.Duration != 0 {
		t.Errorf("Default() overwrote explicit zeros: maxRetries=%d grace=%v",
			*f.Spec.Triggers[2].RabbitMQ.MaxRetries, f.Spec.Scale.ScaleToZeroGracePeriod.Duration)
	}
}
