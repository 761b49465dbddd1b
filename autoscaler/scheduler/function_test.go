package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
)

func TestTriggersFor(t *testing.T) {
	off := false
	cron := func(preWarm *metav1.Duration) *v1alpha1.CronTrigger {
		return &v1alpha1.CronTrigger{Schedule: "@hourly", PreWarm: preWarm}
	}
	tests := []struct {
		name    string
		min     int32
		trigger v1alpha1.Trigger
		want    []string // name/preWarm/auto of each trigger
	}{
		{"preWarm set", 0, v1alpha1.Trigger{Name: "a", Cron: cron(&metav1.Duration{Duration: 5 * time.Second})}, []string{"a/5s/false"}},
		{"preWarm unset: measured", 0, v1alpha1.Trigger{Name: "a", Cron: cron(nil)}, []string{"a/0s/true"}},
		{"min 1: no warm-up", 1, v1alpha1.Trigger{Name: "a", Cron: cron(nil)}, []string{"a/0s/false"}},
		{"disabled", 0, v1alpha1.Trigger{Name: "a", Enabled: &off, Cron: cron(nil)}, nil},
		{"not cron", 0, v1alpha1.Trigger{Name: "web", HTTP: &v1alpha1.HTTPTrigger{}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Spec: v1alpha1.FunctionSpec{
				Runtime: v1alpha1.RuntimeGo, Scale: v1alpha1.Scale{Min: tt.min}, Triggers: []v1alpha1.Trigger{tt.trigger}}}
			fn.Default()
			ts, err := TriggersFor(fn)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tr := range ts {
				got = append(got, fmt.Sprintf("%s/%v/%v", tr.Name, tr.PreWarm, tr.AutoPreWarm))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("TriggersFor = %v, want %v", got, tt.want)
			}
		})
	}
}
