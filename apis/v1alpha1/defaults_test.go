package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

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

// TestEffectiveSecurityContext: each field the user sets replaces its
// default, inside capabilities and seccompProfile too, and the rest of the
// defaults stay.
func TestEffectiveSecurityContext(t *testing.T) {
	restricted := DefaultSecurityContext()
	if got := (&FunctionSpec{}).EffectiveSecurityContext(); !equality.Semantic.DeepEqual(got, restricted) {
		t.Errorf("without spec.securityContext: %+v, want the defaults %+v", got, restricted)
	}
	if !*restricted.RunAsNonRoot || *restricted.AllowPrivilegeEscalation ||
		len(restricted.Capabilities.Drop) != 1 || restricted.Capabilities.Drop[0] != "ALL" ||
		restricted.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("defaults %+v: want non-root, no escalation, drop ALL, seccomp RuntimeDefault", restricted)
	}

	user := &corev1.SecurityContext{
		RunAsNonRoot: ptr(false), RunAsUser: ptr(int64(0)), ReadOnlyRootFilesystem: ptr(true),
		Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("fn.json")},
	}
	spec := &FunctionSpec{SecurityContext: user}
	got := spec.EffectiveSecurityContext()
	want := &corev1.SecurityContext{
		RunAsNonRoot: ptr(false), RunAsUser: ptr(int64(0)), ReadOnlyRootFilesystem: ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("fn.json")},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("EffectiveSecurityContext() = %+v\nwant %+v", got, want)
	}
	// The result is a copy: changing it changes neither the spec nor the
	// next defaults.
	got.Capabilities.Add[0] = "CHOWN"
	*got.RunAsNonRoot = true
	if user.Capabilities.Add[0] != "NET_BIND_SERVICE" || *user.RunAsNonRoot || !*DefaultSecurityContext().RunAsNonRoot {
		t.Error("EffectiveSecurityContext shares memory with the spec or the defaults")
	}
	// An explicitly empty drop list replaces drop ALL.
	spec.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{}}}
	if drop := spec.EffectiveSecurityContext().Capabilities.Drop; drop == nil || len(drop) != 0 {
		t.Errorf("capabilities.drop = %v, want the user's empty list", drop)
	}
}

// The bounds of a request whole and of a drain follow the timeout unless
// set.
func TestEffectiveDurations(t *testing.T) {
	for _, tt := range []struct {
		timeout, maxDuration, drain int32
		wantMax, wantDrain          int32
	}{
		{300, 0, 0, 300, 300},
		{60, 600, 0, 600, 600},
		{60, 600, 30, 600, 30},
		{60, 0, 120, 60, 120},
	} {
		s := FunctionSpec{TimeoutSeconds: tt.timeout, MaxDurationSeconds: tt.maxDuration, DrainSeconds: tt.drain}
		if got, drain := s.EffectiveMaxDurationSeconds(), s.EffectiveDrainSeconds(); got != tt.wantMax || drain != tt.wantDrain {
			t.Errorf("%+v: max duration %d, drain %d; want %d, %d", tt, got, drain, tt.wantMax, tt.wantDrain)
		}
	}
}
