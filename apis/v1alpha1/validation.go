package v1alpha1

import (
	"cmp"
	"fmt"
	"go/token"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // time zones must parse the same on every machine and image

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Mode is where a Function runs. A few rules depend on it: Kubernetes runs
// an image, the local platform builds a source directory.
type Mode string

// The places a Function can run.
const (
	ModeKubernetes Mode = "kubernetes"
	ModeLocal      Mode = "local"
)

// MaxScale is the most instances a Function's scale may name (min, max,
// initial). The CRD's markers on Scale say the same: the API server test
// refuses what passes it with both.
const MaxScale = 1000

// Bounds shared with the CRD markers in function_types.go.
const (
	maxTimeoutSeconds = 3600
	// maxDurationSeconds bounds the durations a connection may last: a
	// day.
	maxDurationSeconds = 86400
	maxConcurrency     = 1000
	maxTarget          = 100000
	maxQueueLength     = 100000
	maxPrefetch        = 1000
	maxRetries         = 100
	maxTriggers        = 16
	maxCommand         = 64
	maxCommandArg      = 4096
	minWindow          = 6 * time.Second
	maxDuration        = time.Hour
	// maxID is the highest user and group ID a pod may name.
	maxID = 1<<31 - 1
)

// cronParser accepts the standard five fields and descriptors (@hourly,
// @every 5m), the syntax the cron scheduler runs.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var (
	identifierPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	jsIdentifier      = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)
	nodeModule        = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_/-]*$`)
)

// Validate checks everything about a defaulted Function that the CRD schema
// cannot, and repeats what it can, since the local platform has no API
// server. It returns every problem found, each naming its field path.
func Validate(f *Function, mode Mode) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1035Label(f.Name) {
		errs = append(errs, field.Invalid(meta.Child("name"), f.Name, msg))
	}
	if f.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(f.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), f.Namespace, msg))
		}
	}
	return append(errs, validateSpec(&f.Spec, mode, field.NewPath("spec"))...)
}

func validateSpec(s *FunctionSpec, mode Mode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateStart(s, mode, p)...)
	switch s.Protocol {
	case "", ProtocolHTTP1, ProtocolH2C:
	default:
		errs = append(errs, field.NotSupported(p.Child("protocol"), s.Protocol, []Protocol{ProtocolHTTP1, ProtocolH2C}))
	}
	errs = append(errs, validateEnv(s, mode, p.Child("env"))...)
	errs = append(errs, validateSecurityContext(s, p.Child("securityContext"))...)
	errs = append(errs, inRange(p.Child("timeoutSeconds"), s.TimeoutSeconds, 1, maxTimeoutSeconds)...)
	errs = append(errs, inRange(p.Child("idleTimeoutSeconds"), s.IdleTimeoutSeconds, 0, maxDurationSeconds)...)
	errs = append(errs, inRange(p.Child("drainSeconds"), s.DrainSeconds, 0, maxDurationSeconds)...)
	errs = append(errs, inRange(p.Child("maxDurationSeconds"), s.MaxDurationSeconds, 0, maxDurationSeconds)...)
	if s.MaxDurationSeconds != 0 && s.MaxDurationSeconds < s.TimeoutSeconds {
		errs = append(errs, field.Invalid(p.Child("maxDurationSeconds"), s.MaxDurationSeconds,
			fmt.Sprintf("must be timeoutSeconds (%d) at least: it bounds the whole request, timeoutSeconds its start", s.TimeoutSeconds)))
	}
	errs = append(errs, inRange(p.Child("concurrency"), s.Concurrency, 0, maxConcurrency)...)
	errs = append(errs, validateScale(&s.Scale, p.Child("scale"))...)
	errs = append(errs, validateAsync(&s.Async, p.Child("async"))...)
	return append(errs, validateTriggers(s.Triggers, mode, p.Child("triggers"))...)
}

// validateStart checks what starts the function in mode: a runtime's
// handler, or its own server's image or command.
func validateStart(s *FunctionSpec, mode Mode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Runtime {
	case RuntimeGo, RuntimePython, RuntimeNode:
		errs = append(errs, validateHandler(s.Runtime, s.Handler, p.Child("handler"))...)
		if len(s.Command) > 0 {
			errs = append(errs, field.Forbidden(p.Child("command"), "a runtime starts the function: command is for a Function without a runtime, which brings its own server"))
		}
	case "":
		if s.Handler != "" {
			errs = append(errs, field.Forbidden(p.Child("handler"), "only a runtime loads a handler: set runtime (go, python, node), or leave handler out for a Function that brings its own server"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("runtime"), s.Runtime, []Runtime{RuntimeGo, RuntimePython, RuntimeNode}))
	}
	errs = append(errs, validateCommand(s.Command, p.Child("command"))...)
	ownServer := s.Runtime == ""
	switch {
	case mode == ModeKubernetes && s.Image == "" && ownServer:
		errs = append(errs, field.Required(p.Child("image"), "a Function without a runtime runs its own server's image on Kubernetes"))
	case mode == ModeKubernetes && s.Image == "":
		errs = append(errs, field.Required(p.Child("image"), "Kubernetes runs the function from a container image"))
	case mode == ModeLocal && s.Source == "" && ownServer:
		errs = append(errs, field.Required(p.Child("source"), "the directory the local platform runs its own server's command in"))
	case mode == ModeLocal && s.Source == "":
		errs = append(errs, field.Required(p.Child("source"), "the local platform builds the function from a source directory"))
	}
	if mode == ModeLocal && ownServer && len(s.Command) == 0 {
		errs = append(errs, field.Required(p.Child("command"), "the command that starts the function's own server, such as [node, server.js]; or set runtime (go, python, node) for a handler"))
	}
	return errs
}

func validateCommand(cmd []string, p *field.Path) field.ErrorList {
	if len(cmd) > maxCommand {
		return field.ErrorList{field.TooMany(p, len(cmd), maxCommand)}
	}
	var errs field.ErrorList
	for i, arg := range cmd {
		switch {
		case i == 0 && arg == "":
			errs = append(errs, field.Invalid(p.Index(i), arg, "must name the program to run"))
		case len(arg) > maxCommandArg:
			errs = append(errs, field.TooLong(p.Index(i), arg, maxCommandArg))
		}
	}
	return errs
}

func validateHandler(rt Runtime, h string, p *field.Path) field.ErrorList {
	if h == "" {
		return nil // the runtime's default
	}
	if rt == RuntimeGo {
		if !token.IsIdentifier(h) || !token.IsExported(h) {
			return field.ErrorList{field.Invalid(p, h, "must be the name of an exported Go function, such as Handle")}
		}
		return nil
	}
	module, fn, ok := cutLast(h, ".")
	valid := ok && module != ""
	if rt == RuntimePython {
		valid = valid && identifierPattern.MatchString(fn)
		for part := range strings.SplitSeq(module, ".") {
			valid = valid && identifierPattern.MatchString(part)
		}
	} else {
		valid = valid && nodeModule.MatchString(module) && jsIdentifier.MatchString(fn)
	}
	if !valid {
		return field.ErrorList{field.Invalid(p, h, "must be module.function, such as "+(&FunctionSpec{Runtime: rt}).EffectiveHandler())}
	}
	return nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func validateEnv(s *FunctionSpec, mode Mode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, len(s.Env))
	for i, e := range s.Env {
		ep := p.Index(i)
		for _, msg := range validation.IsEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
		}
		if e.Name == "PORT" || strings.HasPrefix(e.Name, "SLESS_") {
			errs = append(errs, field.Invalid(ep.Child("name"), e.Name, "PORT and names starting with SLESS_ are set by the platform"))
		}
		if seen[e.Name] {
			errs = append(errs, field.Duplicate(ep.Child("name"), e.Name))
		}
		seen[e.Name] = true
		if e.ValueFrom != nil && mode == ModeLocal {
			errs = append(errs, field.Forbidden(ep.Child("valueFrom"), "the local platform has no Secrets or ConfigMaps; use value"))
		}
	}
	return errs
}

// validateSecurityContext checks the function container's security context
// as it will be, the user's fields over the defaults, for what would keep
// the function from running: the API server would refuse its Deployment,
// or the kubelet its container. It names the field the user sets. Checked
// in both modes, so that a manifest valid locally is valid on a cluster,
// although the local platform ignores the field.
func validateSecurityContext(s *FunctionSpec, p *field.Path) field.ErrorList {
	user := s.SecurityContext
	if user == nil {
		return nil
	}
	sc := s.EffectiveSecurityContext()
	var errs field.ErrorList
	for _, id := range []struct {
		name  string
		value *int64
	}{{"runAsUser", user.RunAsUser}, {"runAsGroup", user.RunAsGroup}} {
		if id.value != nil && (*id.value < 0 || *id.value > maxID) {
			errs = append(errs, field.Invalid(p.Child(id.name), *id.value, fmt.Sprintf("must be between 0 and %d", maxID)))
		}
	}
	if id := user.RunAsUser; id != nil && *id == 0 && *sc.RunAsNonRoot {
		errs = append(errs, field.Invalid(p.Child("runAsUser"), *id, "runAsUser 0 is root: set runAsNonRoot false too, since it defaults to true"))
	}
	if escalation := *sc.AllowPrivilegeEscalation; !escalation {
		if user.Privileged != nil && *user.Privileged {
			errs = append(errs, field.Invalid(p.Child("privileged"), true, "privileged needs allowPrivilegeEscalation true, since it defaults to false"))
		}
		if user.Capabilities != nil {
			for i, c := range user.Capabilities.Add {
				if c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN" {
					errs = append(errs, field.Invalid(p.Child("capabilities", "add").Index(i), c, "SYS_ADMIN needs allowPrivilegeEscalation true, since it defaults to false"))
				}
			}
		}
	}
	if sp := user.SeccompProfile; sp != nil {
		errs = append(errs, validateProfile(p.Child("seccompProfile"), string(sp.Type), sp.LocalhostProfile,
			string(corev1.SeccompProfileTypeRuntimeDefault), string(corev1.SeccompProfileTypeUnconfined), string(corev1.SeccompProfileTypeLocalhost))...)
	}
	if ap := user.AppArmorProfile; ap != nil {
		errs = append(errs, validateProfile(p.Child("appArmorProfile"), string(ap.Type), ap.LocalhostProfile,
			string(corev1.AppArmorProfileTypeRuntimeDefault), string(corev1.AppArmorProfileTypeUnconfined), string(corev1.AppArmorProfileTypeLocalhost))...)
	}
	return errs
}

// validateProfile checks a seccomp or AppArmor profile: a known type, and a
// localhostProfile exactly when the type is Localhost.
func validateProfile(p *field.Path, typ string, localhost *string, runtimeDefault, unconfined, local string) field.ErrorList {
	switch typ {
	case runtimeDefault, unconfined:
		if localhost != nil {
			return field.ErrorList{field.Forbidden(p.Child("localhostProfile"), "only with type "+local)}
		}
	case local:
		if localhost == nil || *localhost == "" {
			return field.ErrorList{field.Required(p.Child("localhostProfile"), "the profile to load, with type "+local)}
		}
	default:
		return field.ErrorList{field.NotSupported(p.Child("type"), typ, []string{runtimeDefault, unconfined, local})}
	}
	return nil
}

// ValidateScaleBounds checks a scale's min, max and initial, at path p:
// the one check of them, for a Function (Validate) and for a change of its
// bounds through the admin API, which gets the same answer on every
// platform.
func ValidateScaleBounds(s *Scale, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, inRange(p.Child("min"), s.Min, 0, MaxScale)...)
	errs = append(errs, inRange(p.Child("max"), s.Max, 1, MaxScale)...)
	if s.Min > s.Max {
		errs = append(errs, field.Invalid(p.Child("min"), s.Min, fmt.Sprintf("must not exceed max (%d)", s.Max)))
	}
	if s.Initial != nil && (*s.Initial < s.Min || *s.Initial > s.Max) {
		errs = append(errs, field.Invalid(p.Child("initial"), *s.Initial, fmt.Sprintf("must lie within [min, max] = [%d, %d]", s.Min, s.Max)))
	}
	return errs
}

func validateScale(s *Scale, p *field.Path) field.ErrorList {
	errs := ValidateScaleBounds(s, p)
	errs = append(errs, inRange(p.Child("target"), s.Target, 1, maxTarget)...)
	errs = append(errs, inRange(p.Child("targetUtilization"), s.TargetUtilization, 1, 100)...)
	if s.Metric != MetricConcurrency && s.Metric != MetricRPS {
		errs = append(errs, field.NotSupported(p.Child("metric"), s.Metric, []ScaleMetric{MetricConcurrency, MetricRPS}))
	}
	if s.Owner != OwnerSless && s.Owner != OwnerKEDA {
		errs = append(errs, field.NotSupported(p.Child("owner"), s.Owner, []ScaleOwner{OwnerSless, OwnerKEDA}))
	}
	if s.Window != nil {
		errs = append(errs, durationInRange(p.Child("window"), s.Window.Duration, minWindow, maxDuration)...)
	}
	if s.ScaleToZeroGracePeriod != nil {
		errs = append(errs, durationInRange(p.Child("scaleToZeroGracePeriod"), s.ScaleToZeroGracePeriod.Duration, 0, maxDuration)...)
	}
	return errs
}

func validateTriggers(ts []Trigger, mode Mode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(ts) > maxTriggers {
		errs = append(errs, field.TooMany(p, len(ts), maxTriggers))
	}
	names := make(map[string]bool, len(ts))
	queues := make(map[string]bool, len(ts))
	httpTriggers := 0
	for i := range ts {
		t, tp := &ts[i], p.Index(i)
		for _, msg := range validation.IsDNS1123Label(t.Name) {
			errs = append(errs, field.Invalid(tp.Child("name"), t.Name, msg))
		}
		if names[t.Name] {
			errs = append(errs, field.Duplicate(tp.Child("name"), t.Name))
		}
		names[t.Name] = true
		kinds := 0
		if t.HTTP != nil {
			kinds++
			httpTriggers++
			if httpTriggers == 2 {
				errs = append(errs, field.Invalid(tp.Child("http"), "{}", "a function has at most one http trigger"))
			}
		}
		if t.Cron != nil {
			kinds++
			errs = append(errs, validateCron(t.Cron, tp.Child("cron"))...)
		}
		if r := t.RabbitMQ; r != nil {
			kinds++
			errs = append(errs, validateRabbitMQ(r, mode, tp.Child("rabbitmq"))...)
			if queues[r.Queue] {
				errs = append(errs, field.Duplicate(tp.Child("rabbitmq", "queue"), r.Queue))
			}
			queues[r.Queue] = true
		}
		if kinds != 1 {
			errs = append(errs, field.Invalid(tp, t.Name, fmt.Sprintf("exactly one of http, cron or rabbitmq must be set, found %d", kinds)))
		}
	}
	return errs
}

func validateCron(c *CronTrigger, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp := p.Child("schedule")
	switch {
	case c.Schedule == "":
		errs = append(errs, field.Required(sp, "a cron schedule such as \"*/5 * * * *\""))
	case strings.HasPrefix(c.Schedule, "TZ=") || strings.HasPrefix(c.Schedule, "CRON_TZ="):
		errs = append(errs, field.Invalid(sp, c.Schedule, "set the time zone with timezone, not in the schedule"))
	default:
		if _, err := cronParser.Parse(c.Schedule); err != nil {
			errs = append(errs, field.Invalid(sp, c.Schedule, err.Error()))
		}
	}
	if c.Timezone == "Local" {
		errs = append(errs, field.Invalid(p.Child("timezone"), c.Timezone, "name an IANA time zone; Local differs from machine to machine"))
	} else if _, err := time.LoadLocation(c.Timezone); err != nil {
		errs = append(errs, field.Invalid(p.Child("timezone"), c.Timezone, "unknown IANA time zone"))
	}
	if c.PreWarm != nil {
		errs = append(errs, durationInRange(p.Child("preWarm"), c.PreWarm.Duration, 0, maxDuration)...)
	}
	return errs
}

func validateRabbitMQ(r *RabbitMQTrigger, mode Mode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Queue == "" {
		errs = append(errs, field.Required(p.Child("queue"), "the queue to consume"))
	} else if len(r.Queue) > maxQueueName {
		errs = append(errs, field.TooLong(p.Child("queue"), r.Queue, maxQueueName))
	}
	if r.ConnectionSecret == "" && mode == ModeKubernetes {
		errs = append(errs, field.Required(p.Child("connectionSecret"), "a Secret whose key url holds the AMQP URL"))
	}
	if r.ConnectionSecret != "" {
		for _, msg := range validation.IsDNS1123Subdomain(r.ConnectionSecret) {
			errs = append(errs, field.Invalid(p.Child("connectionSecret"), r.ConnectionSecret, msg))
		}
	}
	errs = append(errs, inRange(p.Child("prefetch"), r.Prefetch, 1, maxPrefetch)...)
	errs = append(errs, inRange(p.Child("targetQueueLength"), r.TargetQueueLength, 1, maxQueueLength)...)
	errs = append(errs, inRange(p.Child("activationQueueLength"), r.ActivationQueueLength, 0, maxQueueLength)...)
	if r.MaxRetries != nil {
		errs = append(errs, inRange(p.Child("maxRetries"), *r.MaxRetries, 0, maxRetries)...)
	}
	if r.QueueType != "" && r.QueueType != QueueClassic && r.QueueType != QueueQuorum {
		errs = append(errs, field.NotSupported(p.Child("queueType"), r.QueueType, []QueueType{QueueClassic, QueueQuorum}))
	}
	if r.DeadLetterQueue != "" && r.DeadLetterQueue == r.Queue {
		errs = append(errs, field.Invalid(p.Child("deadLetterQueue"), r.DeadLetterQueue, "must differ from queue"))
	}
	return errs
}

func inRange(p *field.Path, v, lo, hi int32) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("must be between %d and %d", lo, hi))}
	}
	return nil
}

func durationInRange(p *field.Path, d, lo, hi time.Duration) field.ErrorList {
	if d < lo || d > hi {
		return field.ErrorList{field.Invalid(p, d.String(), fmt.Sprintf("must be between %v and %v", lo, hi))}
	}
	return nil
}

// ParseSchedule is the trigger's schedule as the scheduler runs it, by the
// parser validation checks it with, and its time zone.
func (c *CronTrigger) ParseSchedule() (cron.Schedule, *time.Location, error) {
	loc, err := time.LoadLocation(cmp.Or(c.Timezone, "UTC"))
	if err != nil {
		return nil, nil, fmt.Errorf("timezone %q: %w", c.Timezone, err)
	}
	s, err := cronParser.Parse(c.Schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule %q: %w", c.Schedule, err)
	}
	return onceInRepeats{s}, loc, nil
}

// onceInRepeats fires a wall-clock time once when the clocks go back and
// the hour repeats, as a daily job is expected to run once (robfig/cron
// fires it in both). A time in a gap, skipped by the clocks, is skipped.
type onceInRepeats struct{ cron.Schedule }

func (s onceInRepeats) Next(t time.Time) time.Time {
	n := s.Schedule.Next(t)
	_, before := n.Add(-3 * time.Hour).Zone()
	_, after := n.Zone()
	back := time.Duration(before-after) * time.Second // > 0 when the clocks went back
	if back <= 0 || n.IsZero() {
		return n
	}
	first := n.Add(-back) // the same wall-clock time, the first time round
	if first.Format(time.DateTime) == n.Format(time.DateTime) && s.Schedule.Next(first.Add(-time.Nanosecond)).Equal(first) {
		return s.Next(n)
	}
	return n
}
