package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
)

// What the kubelet reports of a pod becomes the function's
// InstancesReady: the failures that need a change to the Function are
// False with their cause; a start in progress, a ready pod or a pod going
// away are not.
func TestInstancesCondition(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	waiting := func(reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "function", Image: "registry.test/nope:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	crashed := corev1.ContainerStatus{Name: "function", RestartCount: 2,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3,
			Reason: "Error", Message: "/function/index.js:1\nTypeError: boom\n    at Object.<anonymous> (/function/index.js:1:7)\n    at Module._compile (node:internal/modules/cjs/loader:1256:14)\nsless: cannot load module\n"}}}
	running := corev1.ContainerStatus{Name: "function", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	pod := func(name string, ready bool, since time.Time, cs ...corev1.ContainerStatus) corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since)}},
			ContainerStatuses: cs}}
	}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		reason  string
		want    []string
		recheck time.Duration
	}{
		{"no pods", nil, v1alpha1.ReasonInstancesHealthy, nil, 0},
		{"an image that cannot be pulled", []corev1.Pod{pod("a", false, now, waiting("ImagePullBackOff", "Back-off pulling image"))},
			v1alpha1.ReasonImagePullFailed, []string{"container function", "registry.test/nope:1", "ImagePullBackOff"}, 0},
		{"a crash loop quotes the output", []corev1.Pod{pod("a", false, now, crashed)},
			v1alpha1.ReasonCrashing, []string{"crashed 2 times", "exit code 3", "TypeError: boom\nsless: cannot load module"}, 0},
		{"a container that cannot be created", []corev1.Pod{pod("a", false, now, waiting("CreateContainerConfigError", "container has runAsNonRoot and image will run as root"))},
			v1alpha1.ReasonContainerFailed, []string{"runAsNonRoot"}, 0},
		{"a start in progress", []corev1.Pod{pod("a", false, now, waiting("ContainerCreating", ""))}, v1alpha1.ReasonInstancesHealthy, nil, 0},
		{"unready for a while is looked at again", []corev1.Pod{pod("a", false, now.Add(-20*time.Second), running)},
			v1alpha1.ReasonInstancesHealthy, nil, 40 * time.Second},
		{"unready past the grace", []corev1.Pod{pod("a", false, now.Add(-2*time.Minute), running)},
			v1alpha1.ReasonReadinessFailing, []string{"instance a", "readiness"}, 0},
		{"a ready pod beside a failing one", []corev1.Pod{pod("a", true, now, running), pod("b", false, now, crashed)},
			v1alpha1.ReasonCrashing, []string{"TypeError"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, recheck := instancesCondition(tc.pods, now)
			wantStatus := metav1.ConditionFalse
			if tc.reason == v1alpha1.ReasonInstancesHealthy {
				wantStatus = metav1.ConditionTrue
			}
			if c.Reason != tc.reason || c.Status != wantStatus || recheck != tc.recheck {
				t.Errorf("condition %+v, recheck %s; want %s %s, recheck %s", c, recheck, wantStatus, tc.reason, tc.recheck)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q lacks %q", c.Message, w)
				}
			}
		})
	}
}
