package controller

import (
	"cmp"
	"encoding/json"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/wire"
)

// The containers of a function's pod.
const (
	FunctionContainer   = "function"
	QueueProxyContainer = "queue-proxy"
)

const (
	// graceMargin is added to the drain time (the Function's timeout) for
	// the queue-proxy's quiet period and exit.
	graceMargin = 10
)

// queueProxyResources are the sidecar's requests and limits. There is no CPU
// limit: the queue-proxy's CPU grows with the function's traffic, and CFS
// throttling of a limited sidecar stalls every request for the rest of a
// 100 ms quota period, so latency would suffer exactly under load. The
// request lets the scheduler count it; memory, which cannot be throttled,
// is capped.
var queueProxyResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("25m"),
		corev1.ResourceMemory: resource.MustParse("32Mi"),
	},
	Limits: corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("256Mi"),
	},
}

// functionLabels are the labels of a Function's objects and pods, and the
// selector of its pods.
func functionLabels(fn *v1alpha1.Function) map[string]string {
	return map[string]string{wire.FunctionLabel: fn.Name, wire.NamespaceLabel: fn.Namespace}
}

func objectMeta(fn *v1alpha1.Function, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: fn.Namespace, Name: name, Labels: functionLabels(fn)}
}

// deployment is the desired Deployment of a defaulted Function. Replicas
// count only when it is created; after that the autoscaler or KEDA owns
// them.
func (r *FunctionReconciler) deployment(fn *v1alpha1.Function) *appsv1.Deployment {
	drain := int64(fn.Spec.EffectiveDrainSeconds())
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(fn, fn.Name),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(fn.Spec.Scale.InitialReplicas()),
			Selector: &metav1.LabelSelector{MatchLabels: functionLabels(fn)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: functionLabels(fn),
					Annotations: map[string]string{
						"prometheus.io/scrape":                    "true",
						"prometheus.io/port":                      strconv.Itoa(wire.AdminPort),
						"prometheus.io/path":                      "/metrics",
						"kubectl.kubernetes.io/default-container": FunctionContainer,
					},
				},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{functionContainer(fn), r.queueProxyContainer(fn, drain)},
					// The queue-proxy drains for up to the timeout, and
					// the kubelet must not kill it before.
					TerminationGracePeriodSeconds: ptr.To(drain + graceMargin),
					// Service links would put a variable per Service of
					// the namespace into every pod: thousands with many
					// functions, and none is needed.
					EnableServiceLinks: ptr.To(false),
					// Pod Security "restricted" asks for a seccomp
					// profile; the function container also states it, so
					// that its securityContext can change it.
					SecurityContext: &corev1.PodSecurityContext{
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				},
			},
		},
	}
}

// functionContainer runs the Function's image: the runtime listens on
// 127.0.0.1:PORT and loads SLESS_HANDLER, or the function's own server
// (its command, or the image's entrypoint) listens on PORT. Its security
// context passes Pod Security "restricted" unless spec.securityContext says
// otherwise (v1alpha1.DefaultSecurityContext).
func functionContainer(fn *v1alpha1.Function) corev1.Container {
	env := []corev1.EnvVar{{Name: "PORT", Value: strconv.Itoa(wire.UserPort)}}
	if h := fn.Spec.EffectiveHandler(); h != "" {
		env = append(env, corev1.EnvVar{Name: "SLESS_HANDLER", Value: h})
	}
	return corev1.Container{
		Name:      FunctionContainer,
		Image:     fn.Spec.Image,
		Command:   fn.Spec.Command,
		Env:       append(env, fn.Spec.Env...),
		Resources: fn.Spec.Resources,
		Lifecycle: &corev1.Lifecycle{
			// The user process serves on until the queue-proxy has
			// drained (its open WebSockets too), and at least
			// wire.MinStopDelay, while the activator learns that the
			// instance is going.
			PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: wire.WaitForDrainPath, Port: intstr.FromInt32(wire.AdminPort),
			}},
		},
		SecurityContext: fn.Spec.EffectiveSecurityContext(),
		// A crash's last lines of output become its termination
		// message, which ConditionInstancesReady quotes.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// queueProxyContainer runs `sless queue-proxy`, configured by the
// environment contract of the queue-proxy (docs/queue-proxy.md).
func (r *FunctionReconciler) queueProxyContainer(fn *v1alpha1.Function, drain int64) corev1.Container {
	env := []corev1.EnvVar{
		{Name: wire.EnvNamespace, Value: fn.Namespace},
		{Name: wire.EnvFunction, Value: fn.Name},
		{Name: wire.EnvUserPort, Value: strconv.Itoa(wire.UserPort)},
		{Name: wire.EnvUserProtocol, Value: string(cmp.Or(fn.Spec.Protocol, v1alpha1.ProtocolHTTP1))},
		{Name: wire.EnvServingPort, Value: strconv.Itoa(wire.ServingPort)},
		{Name: wire.EnvAdminPort, Value: strconv.Itoa(wire.AdminPort)},
		{Name: wire.EnvConcurrency, Value: strconv.Itoa(int(fn.Spec.Concurrency))},
		{Name: wire.EnvTimeout, Value: strconv.Itoa(int(fn.Spec.TimeoutSeconds))},
		{Name: wire.EnvIdleTimeout, Value: strconv.Itoa(int(fn.Spec.IdleTimeoutSeconds))},
		{Name: wire.EnvMaxDuration, Value: strconv.Itoa(int(fn.Spec.EffectiveMaxDurationSeconds()))},
		{Name: wire.EnvDrain, Value: strconv.FormatInt(drain, 10)},
	}
	if rabbit := rabbitMQEnv(fn); rabbit != nil {
		env = append(append(env, rabbit...), corev1.EnvVar{Name: wire.EnvRecordsURL, Value: r.opts.RecordsURL},
			corev1.EnvVar{Name: wire.EnvPodIP, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}})
	}
	return corev1.Container{
		Name:  QueueProxyContainer,
		Image: r.opts.Image,
		Args:  []string{"queue-proxy"},
		Env:   env,
		Ports: []corev1.ContainerPort{
			{Name: wire.ServingPortName, ContainerPort: wire.ServingPort},
			{Name: wire.AdminPortName, ContainerPort: wire.AdminPort},
		},
		// Every field the API server would default is set, so that live
		// and desired compare equal.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromInt32(wire.AdminPort),
			}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		Resources: queueProxyResources,
		// Pod Security "restricted", and more: the sidecar writes no
		// files. The user is the sless image's, by number, so that the
		// kubelet can check runAsNonRoot.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](wire.NonRootUID),
			RunAsGroup:               ptr.To[int64](wire.NonRootUID),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// rabbitMQEnv tells the queue-proxy the queues to consume: the triggers
// as JSON, and each broker URL from the "url" key of the trigger's
// connectionSecret, so that no URL is in the Deployment.
func rabbitMQEnv(fn *v1alpha1.Function) []corev1.EnvVar {
	triggers := wire.RabbitMQTriggers(fn.Spec)
	if len(triggers) == 0 {
		return nil
	}
	raw, _ := json.Marshal(triggers) // strings and numbers: cannot fail
	env := []corev1.EnvVar{{Name: wire.EnvRabbitMQ, Value: string(raw)}}
	for _, t := range fn.Spec.Triggers {
		if r := t.RabbitMQ; r != nil && t.IsEnabled() {
			env = append(env, corev1.EnvVar{Name: wire.AMQPURLEnv(t.Name), ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: r.ConnectionSecret}, Key: wire.AMQPURLKey},
			}})
		}
	}
	return env
}

// deploymentPart owns the pod template. Replicas and the selector (which
// cannot change) are set at creation only. Annotations others put on the
// template (kubectl rollout restart's) are kept.
var deploymentPart = part[*appsv1.Deployment]{
	owned: func(d *appsv1.Deployment) any { return &d.Spec.Template },
	set: func(dst, src *appsv1.Deployment) {
		keep := dst.Spec.Template.Annotations
		dst.Spec.Template = *src.Spec.Template.DeepCopy()
		dst.Spec.Template.Annotations = merged(keep, src.Spec.Template.Annotations)
	},
}
