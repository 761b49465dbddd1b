package v1alpha1

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// validFunction returns a defaulted Function that passes validation in both
// modes, for cases to break one field at a time.
func validFunction() *Function {
	f := &Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: FunctionSpec{
			Runtime: RuntimeGo,
			Source:  "./hello",
			Image:   "registry.example/hello:1",
			Triggers: []Trigger{
				{Name: "web", HTTP: &HTTPTrigger{}},
				{Name: "nightly", Cron: &CronTrigger{Schedule: "*/5 * * * *", Timezone: "Europe/Berlin"}},
				{Name: "orders", RabbitMQ: &RabbitMQTrigger{Queue: "orders", ConnectionSecret: "amqp", DeadLetterQueue: "orders.dlq"}},
			},
		},
	}
	f.Default()
	return f
}

func ptr[T any](v T) *T { return &v }

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mode   Mode
		mutate func(*Function)
		// want lists substrings of the error, in order; none means valid.
		want []string
	}{
		{name: "valid kubernetes", mode: ModeKubernetes, mutate: func(*Function) {}},
		{name: "valid local", mode: ModeLocal, mutate: func(*Function) {}},
		{name: "python handler", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Handler = RuntimePython, "pkg.module.handle"
		}},
		{name: "node handler in subdirectory", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Handler = RuntimeNode, "lib/my-fn.$handle"
		}},
		{name: "cron descriptor", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[1].Cron.Schedule = "@every 90s" }},
		{name: "initial zero", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Scale.Initial = ptr(int32(0)) }},
		{name: "no dead letter queue, no retries", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Triggers[2].RabbitMQ.DeadLetterQueue = ""
			f.Spec.Triggers[2].RabbitMQ.MaxRetries = ptr(int32(0))
		}},
		{name: "local rabbitmq without secret", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[2].RabbitMQ.ConnectionSecret = "" }},
		{name: "quorum queue", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[2].RabbitMQ.QueueType = QueueQuorum }},

		{name: "bad name", mode: ModeLocal, mutate: func(f *Function) { f.Name = "1hello" },
			want: []string{"metadata.name: Invalid value: \"1hello\""}},
		{name: "bad namespace", mode: ModeLocal, mutate: func(f *Function) { f.Namespace = "Default" },
			want: []string{"metadata.namespace: Invalid value"}},
		{name: "own server on kubernetes", mode: ModeKubernetes, mutate: func(f *Function) { f.Spec.Runtime = "" }},
		{name: "own server on kubernetes with its command", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Command = "", []string{"/bin/server", "--port", "$(PORT)"}
		}},
		{name: "own server locally", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Command = "", []string{"node", "server.js"}
		}},
		{name: "own server locally needs its command", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Runtime = "" },
			want: []string{"spec.command: Required value: the command that starts the function's own server"}},
		{name: "own server on kubernetes needs its image", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Image = "", ""
		}, want: []string{"spec.image: Required value: a Function without a runtime runs its own server's image"}},
		{name: "own server has no handler", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Handler = "", "Handle"
		}, want: []string{"spec.handler: Forbidden: only a runtime loads a handler"}},
		{name: "a runtime has no command", mode: ModeKubernetes, mutate: func(f *Function) { f.Spec.Command = []string{"./server"} },
			want: []string{"spec.command: Forbidden: a runtime starts the function"}},
		{name: "command without a program", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Command = "", []string{"", "server.js"}
		}, want: []string{`spec.command[0]: Invalid value: "": must name the program to run`}},
		{name: "command too long", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Command = "", make([]string, 65)
		}, want: []string{"spec.command: Too many: 65: must have at most 64 items"}},
		{name: "command argument too long", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Command = "", []string{"node", strings.Repeat("x", 4097)}
		}, want: []string{"spec.command[1]: Too long: may not be more than 4096 bytes"}},
		{name: "unknown runtime", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Runtime = "ruby" },
			want: []string{`spec.runtime: Unsupported value: "ruby"`}},
		{name: "unexported go handler", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Handler = "handle" },
			want: []string{`spec.handler: Invalid value: "handle": must be the name of an exported Go function`}},
		{name: "python handler without module", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Handler = RuntimePython, "handle"
		}, want: []string{"spec.handler", "such as main.handle"}},
		{name: "node handler escaping", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Runtime, f.Spec.Handler = RuntimeNode, "../x.handle"
		}, want: []string{"spec.handler", "such as index.handle"}},
		{name: "kubernetes needs image", mode: ModeKubernetes, mutate: func(f *Function) { f.Spec.Image = "" },
			want: []string{"spec.image: Required value"}},
		{name: "local needs source", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Source = "" },
			want: []string{"spec.source: Required value"}},
		{name: "env", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Env = []corev1.EnvVar{
				{Name: "OK", Value: "1"},
				{Name: "1BAD"},
				{Name: "PORT"},
				{Name: "OK"},
				{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "t"}}},
			}
		}, want: []string{`spec.env[1].name: Invalid value: "1BAD"`, `spec.env[2].name: Invalid value: "PORT"`,
			`spec.env[3].name: Duplicate value: "OK"`, "spec.env[4].valueFrom: Forbidden"}},
		{name: "valueFrom is fine on kubernetes", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "t"}}}}
		}},
		{name: "root, said twice", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr(false), RunAsUser: ptr(int64(0))}
		}},
		{name: "privileged with escalation", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{Privileged: ptr(true), AllowPrivilegeEscalation: ptr(true)}
		}},
		{name: "localhost seccomp profile", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
				Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("profiles/fn.json")}}
		}},
		{name: "root, said once", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(0))}
		}, want: []string{"spec.securityContext.runAsUser: Invalid value: 0: runAsUser 0 is root: set runAsNonRoot false too"}},
		{name: "security context the API server would refuse", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{
				RunAsUser: ptr(int64(-1)), RunAsGroup: ptr(int64(1) << 31), Privileged: ptr(true),
				Capabilities:    &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", "CAP_SYS_ADMIN"}},
				SeccompProfile:  &corev1.SeccompProfile{Type: "runtimeDefault"},
				AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost},
			}
		}, want: []string{"spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647",
			"spec.securityContext.runAsGroup: Invalid value: 2147483648",
			"spec.securityContext.privileged: Invalid value: true: privileged needs allowPrivilegeEscalation true",
			`spec.securityContext.capabilities.add[1]: Invalid value: "CAP_SYS_ADMIN": SYS_ADMIN needs allowPrivilegeEscalation true`,
			`spec.securityContext.seccompProfile.type: Unsupported value: "runtimeDefault"`,
			"spec.securityContext.appArmorProfile.localhostProfile: Required value"}},
		{name: "profile of another type", mode: ModeKubernetes, mutate: func(f *Function) {
			f.Spec.SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
				Type: corev1.SeccompProfileTypeRuntimeDefault, LocalhostProfile: ptr("fn.json")}}
		}, want: []string{"spec.securityContext.seccompProfile.localhostProfile: Forbidden: only with type Localhost"}},
		{name: "negative timeout", mode: ModeLocal, mutate: func(f *Function) { f.Spec.TimeoutSeconds = -1 },
			want: []string{"spec.timeoutSeconds: Invalid value: -1: must be between 1 and 3600"}},
		{name: "max duration below the timeout", mode: ModeLocal, mutate: func(f *Function) { f.Spec.MaxDurationSeconds = 30; f.Spec.TimeoutSeconds = 60 },
			want: []string{"spec.maxDurationSeconds: Invalid value: 30: must be timeoutSeconds (60) at least"}},
		{name: "idle timeout past a day", mode: ModeLocal, mutate: func(f *Function) { f.Spec.IdleTimeoutSeconds = 86401 },
			want: []string{"spec.idleTimeoutSeconds: Invalid value: 86401: must be between 0 and 86400"}},
		{name: "unknown protocol", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Protocol = "h3" },
			want: []string{`spec.protocol: Unsupported value: "h3"`}},
		{name: "negative concurrency", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Concurrency = -1 },
			want: []string{"spec.concurrency: Invalid value: -1"}},
		{name: "min above max", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Scale.Min = 11 },
			want: []string{"spec.scale.min: Invalid value: 11: must not exceed max (10)"}},
		{name: "initial above max", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Scale.Initial = ptr(int32(11)) },
			want: []string{"spec.scale.initial: Invalid value: 11: must lie within [min, max] = [0, 10]"}},
		{name: "scale ranges", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Scale.Target = 0
			f.Spec.Scale.TargetUtilization = 101
		}, want: []string{"spec.scale.target: Invalid value: 0", "spec.scale.targetUtilization: Invalid value: 101"}},
		{name: "bad enums", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Scale.Metric = "cpu"
			f.Spec.Scale.Owner = "hpa"
		}, want: []string{`spec.scale.metric: Unsupported value: "cpu"`, `spec.scale.owner: Unsupported value: "hpa"`}},
		{name: "durations", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Scale.Window.Duration = time.Second
			f.Spec.Scale.ScaleToZeroGracePeriod.Duration = -time.Second
			f.Spec.Triggers[1].Cron.PreWarm = &metav1.Duration{Duration: 2 * time.Hour}
		}, want: []string{`spec.scale.window: Invalid value: "1s": must be between 6s and 1h0m0s`,
			`spec.scale.scaleToZeroGracePeriod: Invalid value: "-1s"`, `spec.triggers[1].cron.preWarm: Invalid value: "2h0m0s"`}},
		{name: "async bounds", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Async = Async{MaxAttempts: 101, Concurrency: -1, MinBackoff: &metav1.Duration{Duration: time.Minute},
				MaxBackoff: &metav1.Duration{Duration: time.Second}, MaxAge: &metav1.Duration{Duration: 48 * time.Hour}}
		}, want: []string{`spec.async.maxAttempts: Invalid value: 101`, `spec.async.concurrency: Invalid value: -1`,
			`spec.async.minBackoff: Invalid value: "1m0s": must not exceed maxBackoff`, `spec.async.maxAge: Invalid value: "48h0m0s"`}},
		{name: "async targets", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Async.OnSuccess, f.Spec.Async.OnFailure = &RunTarget{Function: "Next"}, &RunTarget{}
		}, want: []string{`spec.async.onSuccess.function: Invalid value: "Next"`, `spec.async.onFailure: Required value: exactly one of function or queue`}},
		{name: "async queue targets", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Async.OnSuccess = &RunTarget{Queue: "amq.done"}
			f.Spec.Async.OnFailure = &RunTarget{Function: "next", Queue: "failed"}
		}, want: []string{`spec.async.onSuccess.queue: Invalid value: "amq.done": queue names starting amq. are reserved`,
			`spec.async.onFailure.queue: Forbidden: exactly one of function or queue must be set`}},
		{name: "two trigger kinds", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[0].Cron = &CronTrigger{Schedule: "@hourly", Timezone: "UTC"} },
			want: []string{`spec.triggers[0]: Invalid value: "web": exactly one of http, cron or rabbitmq must be set, found 2`}},
		{name: "no trigger kind", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[0].HTTP = nil },
			want: []string{"spec.triggers[0]: Invalid value", "found 0"}},
		{name: "duplicate and bad trigger names", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Triggers[1].Name = "web"
			f.Spec.Triggers[2].Name = "Orders"
		}, want: []string{`spec.triggers[1].name: Duplicate value: "web"`, `spec.triggers[2].name: Invalid value: "Orders"`}},
		{name: "two http triggers", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Triggers = append(f.Spec.Triggers, Trigger{Name: "web2", HTTP: &HTTPTrigger{}})
		}, want: []string{"spec.triggers[3].http: Invalid value", "at most one http trigger"}},
		{name: "bad cron", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Triggers[1].Cron.Schedule = "61 * * * *"
			f.Spec.Triggers[1].Cron.Timezone = "Mars/Olympus"
		}, want: []string{`spec.triggers[1].cron.schedule: Invalid value: "61 * * * *"`, `spec.triggers[1].cron.timezone: Invalid value: "Mars/Olympus"`}},
		{name: "six-field cron", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[1].Cron.Schedule = "0 */5 * * * *" },
			want: []string{"spec.triggers[1].cron.schedule: Invalid value", "expected exactly 5 fields"}},
		{name: "time zone inside schedule", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[1].Cron.Schedule = "CRON_TZ=UTC @hourly" },
			want: []string{"spec.triggers[1].cron.schedule", "set the time zone with timezone"}},
		{name: "local time zone", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[1].Cron.Timezone = "Local" },
			want: []string{"spec.triggers[1].cron.timezone", "Local differs"}},
		{name: "rabbitmq fields", mode: ModeKubernetes, mutate: func(f *Function) {
			r := f.Spec.Triggers[2].RabbitMQ
			r.Queue, r.ConnectionSecret, r.Prefetch, r.MaxRetries = "", "", 0, ptr(int32(101))
		}, want: []string{"spec.triggers[2].rabbitmq.queue: Required value", "spec.triggers[2].rabbitmq.connectionSecret: Required value",
			"spec.triggers[2].rabbitmq.prefetch: Invalid value: 0", "spec.triggers[2].rabbitmq.maxRetries: Invalid value: 101"}},
		{name: "unknown queue type", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[2].RabbitMQ.QueueType = "stream" },
			want: []string{`spec.triggers[2].rabbitmq.queueType: Unsupported value: "stream": supported values: "classic", "quorum"`}},
		{name: "dead letter queue is the queue", mode: ModeLocal, mutate: func(f *Function) { f.Spec.Triggers[2].RabbitMQ.DeadLetterQueue = "orders" },
			want: []string{`spec.triggers[2].rabbitmq.deadLetterQueue: Invalid value: "orders": must differ from queue`}},
		{name: "same queue twice", mode: ModeLocal, mutate: func(f *Function) {
			f.Spec.Triggers = append(f.Spec.Triggers, Trigger{Name: "orders2", RabbitMQ: &RabbitMQTrigger{Queue: "orders", Prefetch: 1, TargetQueueLength: 1}})
		}, want: []string{`spec.triggers[3].rabbitmq.queue: Duplicate value: "orders"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := validFunction()
			tt.mutate(f)
			errs := Validate(f, tt.mode)
			if len(tt.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("Validate() = %v, want no errors", errs)
				}
				return
			}
			got := errs.ToAggregate().Error()
			rest := got
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Validate() = %q\nwant it to contain, in order: %q (missing %q)", got, tt.want, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestValidateCollectsAllErrors(t *testing.T) {
	f := &Function{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	f.Default()
	f.Spec.Scale.Min, f.Spec.Scale.Max = 5, 2
	f.Spec.Handler = "Handle"
	errs := Validate(f, ModeKubernetes)
	// A handler without a runtime, no image and min > max: three
	// independent problems, all reported.
	if len(errs) != 3 {
		t.Fatalf("Validate() returned %d errors, want 3: %v", len(errs), errs)
	}
}
