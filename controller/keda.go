package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler/kpa"
	"sless.dev/sless/internal/wire"
)

// autoscalerTrigger names the external-push trigger in a ScaledObject; the
// RabbitMQ ones are named rabbitmq-<trigger>, so the names never clash.
const autoscalerTrigger = "sless-autoscaler"

// needsKEDA reports whether KEDA writes a defaulted Function's replicas:
// when the Function says so, and always with RabbitMQ triggers, whose
// queue depth KEDA's rabbitmq scaler reads.
func needsKEDA(fn *v1alpha1.Function) bool {
	return fn.Spec.Scale.Owner == v1alpha1.OwnerKEDA ||
		slices.ContainsFunc(fn.Spec.Triggers, func(t v1alpha1.Trigger) bool { return t.RabbitMQ != nil })
}

// ensureKEDA creates or updates the ScaledObject and TriggerAuthentications
// of a Function that needs KEDA, and deletes them from one that does not.
// A TriggerAuthentication is created before and deleted after the
// ScaledObject that refers to it. It returns the live ScaledObject, or nil
// when there is none.
func (r *FunctionReconciler) ensureKEDA(ctx context.Context, fn, spec *v1alpha1.Function) (*kedav1alpha1.ScaledObject, error) {
	if !needsKEDA(spec) {
		so := &kedav1alpha1.ScaledObject{ObjectMeta: metav1.ObjectMeta{Namespace: fn.Namespace, Name: fn.Name}}
		if err := r.deleteOwned(ctx, fn, so); err != nil {
			return nil, err
		}
		return nil, r.deleteStaleAuths(ctx, fn, nil)
	}
	auths := triggerAuthentications(spec)
	for _, a := range auths {
		if _, err := ensure(ctx, r, fn, a, &kedav1alpha1.TriggerAuthentication{}, triggerAuthPart); err != nil {
			return nil, err
		}
	}
	so, err := ensure(ctx, r, fn, r.scaledObject(spec), &kedav1alpha1.ScaledObject{}, scaledObjectPart)
	if err != nil {
		return nil, err
	}
	return so, r.deleteStaleAuths(ctx, fn, auths)
}

// scaledObject is the desired ScaledObject of a defaulted Function: the
// autoscaler's external-push trigger carries HTTP load and cron floors,
// and each RabbitMQ trigger becomes a rabbitmq trigger on its queue length.
func (r *FunctionReconciler) scaledObject(fn *v1alpha1.Function) *kedav1alpha1.ScaledObject {
	s := fn.Spec.Scale
	// KEDA scales to zero cooldownPeriod after the last active report,
	// which is what the autoscaler's idle window plus grace period mean.
	cooldown := int32(math.Ceil((s.Window.Duration + s.ScaleToZeroGracePeriod.Duration).Seconds()))
	// KEDA polls its scalers every pollingInterval (30 s by default): how
	// long a queue waits to wake its function from zero. As often as the
	// autoscaler's panic window reacts to a burst, within [1 s, 30 s].
	panicWindow := s.Window.Duration * kpa.PanicWindowPercent / 100
	polling := min(max(int32(math.Ceil(panicWindow.Seconds())), 1), 30)
	triggers := []kedav1alpha1.ScaleTriggers{{
		Type: "external-push",
		Name: autoscalerTrigger,
		Metadata: map[string]string{
			"scalerAddress":    r.opts.AutoscalerAddress,
			wire.KEDAFunction:  fn.Name,
			wire.KEDANamespace: fn.Namespace,
		},
	}}
	for _, t := range fn.Spec.Triggers {
		if q := t.RabbitMQ; q != nil && t.IsEnabled() {
			triggers = append(triggers, kedav1alpha1.ScaleTriggers{
				Type: "rabbitmq",
				Name: "rabbitmq-" + t.Name,
				Metadata: map[string]string{
					"protocol":        "amqp",
					"queueName":       q.Queue,
					"mode":            "QueueLength",
					"value":           strconv.Itoa(int(q.TargetQueueLength)),
					"activationValue": strconv.Itoa(int(q.ActivationQueueLength)),
				},
				AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: triggerAuthName(fn, t.Name)},
			})
		}
	}
	return &kedav1alpha1.ScaledObject{
		ObjectMeta: objectMeta(fn, fn.Name),
		Spec: kedav1alpha1.ScaledObjectSpec{
			ScaleTargetRef:  &kedav1alpha1.ScaleTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: fn.Name},
			MinReplicaCount: ptr.To(s.Min),
			MaxReplicaCount: ptr.To(s.Max),
			CooldownPeriod:  ptr.To(cooldown),
			PollingInterval: ptr.To(polling),
			Advanced: &kedav1alpha1.AdvancedConfig{HorizontalPodAutoscalerConfig: &kedav1alpha1.HorizontalPodAutoscalerConfig{
				Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: asIs(s.Max), ScaleDown: asIs(s.Max)},
			}},
			Triggers: triggers,
		},
	}
}

// asIs are the rules of an HPA that applies the number it reads as is: no
// stabilization window (300 s by default when scaling down), no tolerance
// (10% by default: 10 → 11 instances would not happen), and a step as
// large as the whole range each second (by default +4 pods or +100% a
// 15 s period up). The autoscaler's decider has its own windows and rate
// limits; KEDA's HPA sits between its number and the Deployment.
func asIs(most int32) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To(int32(0)),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: max(most, 1), PeriodSeconds: 1}},
		Tolerance:                  resource.NewQuantity(0, resource.DecimalSI),
	}
}

// triggerAuthName names a RabbitMQ trigger's TriggerAuthentication. A
// Function name and a trigger name hold no dot, so <function>.<trigger>
// cannot clash with another Function's.
func triggerAuthName(fn *v1alpha1.Function, trigger string) string {
	return fn.Name + "." + trigger
}

// triggerAuthentications hands each RabbitMQ trigger's AMQP URL, the "url"
// key of its connectionSecret, to KEDA as the rabbitmq scaler's host.
func triggerAuthentications(fn *v1alpha1.Function) []*kedav1alpha1.TriggerAuthentication {
	var auths []*kedav1alpha1.TriggerAuthentication
	for _, t := range fn.Spec.Triggers {
		if t.RabbitMQ == nil || !t.IsEnabled() {
			continue
		}
		auths = append(auths, &kedav1alpha1.TriggerAuthentication{
			ObjectMeta: objectMeta(fn, triggerAuthName(fn, t.Name)),
			Spec: kedav1alpha1.TriggerAuthenticationSpec{
				SecretTargetRef: []kedav1alpha1.AuthSecretTargetRef{
					{Parameter: "host", Name: t.RabbitMQ.ConnectionSecret, Key: wire.AMQPURLKey},
				},
			},
		})
	}
	return auths
}

// deleteStaleAuths deletes the Function's TriggerAuthentications not in
// keep.
func (r *FunctionReconciler) deleteStaleAuths(ctx context.Context, fn *v1alpha1.Function, keep []*kedav1alpha1.TriggerAuthentication) error {
	var list kedav1alpha1.TriggerAuthenticationList
	if err := r.client.List(ctx, &list, client.InNamespace(fn.Namespace), client.MatchingLabels{wire.FunctionLabel: fn.Name}); err != nil {
		return fmt.Errorf("list TriggerAuthentications of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		if !slices.ContainsFunc(keep, func(k *kedav1alpha1.TriggerAuthentication) bool { return k.Name == a.Name }) {
			if err := r.deleteOwned(ctx, fn, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteOwned deletes obj when it exists and fn controls it.
func (r *FunctionReconciler) deleteOwned(ctx context.Context, fn *v1alpha1.Function, obj client.Object) error {
	kind := kindOf(obj)
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, fn) {
		return nil
	}
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if !apierrors.IsNotFound(err) {
		r.events.Eventf(fn, obj, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted %s %s, no longer needed", kind, obj.GetName())
	}
	return nil
}

// KEDAInstalled reports whether the API server serves KEDA's ScaledObjects
// and TriggerAuthentications. The manager is set up for the answer (see
// ManagerOptions); KEDAWatch notices when it changes.
func KEDAInstalled(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("discover KEDA: %w", err)
	}
	return kedaServed(dc)
}

func kedaServed(dc discovery.ServerResourcesInterface) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(kedav1alpha1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover KEDA: %w", err)
	}
	served := 0
	for _, r := range list.APIResources {
		if r.Name == "scaledobjects" || r.Name == "triggerauthentications" {
			served++
		}
	}
	return served == 2, nil
}

// DefaultKEDARecheck is how often KEDAWatch asks the API server whether
// KEDA is installed: one small discovery request, and KEDA installed is
// taken up within it.
const DefaultKEDARecheck = 30 * time.Second

// ErrKEDAChanged is why KEDAWatch stops the manager: KEDA was installed or
// removed since the manager was set up.
var ErrKEDAChanged = errors.New("KEDA was installed or removed since the controller started")

// KEDAWatch is a manager Runnable that notices KEDA being installed, or
// removed, after the controller started. The manager cannot take it up in
// place: its cache cannot be configured for kinds the API server did not
// serve when it started (so ScaledObjects would be cached without the
// label selector, cluster-wide), and its watches cannot be removed. So the
// watch stops the manager with ErrKEDAChanged, and the controller's
// Deployment starts it again, set up for what the cluster serves now
// (docs/decisions.md). Every replica watches, leader or not, so that a
// standby is ready when it leads.
type KEDAWatch struct {
	Config *rest.Config
	// Installed is what the manager was set up for.
	Installed bool
	// Every is how often to ask; DefaultKEDARecheck when 0.
	Every time.Duration
	// Log gets the discovery errors, which are retried: an API server
	// that does not answer for a moment is no reason to restart.
	Log logr.Logger
}

// Start asks discovery every w.Every until KEDA's state differs from
// w.Installed, and then returns ErrKEDAChanged; nil when ctx ends first.
func (w *KEDAWatch) Start(ctx context.Context) error {
	dc, err := discovery.NewDiscoveryClientForConfig(w.Config)
	if err != nil {
		return fmt.Errorf("watch for KEDA: %w", err)
	}
	ticker := time.NewTicker(cmp.Or(w.Every, DefaultKEDARecheck))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		installed, err := kedaServed(dc)
		if err != nil {
			w.Log.Error(err, "checking whether KEDA is installed; trying again")
			continue
		}
		if installed != w.Installed {
			now := "served now"
			if !installed {
				now = "no longer served"
			}
			return fmt.Errorf("%w: its ScaledObjects and TriggerAuthentications are %s; stopping, for a restart set up for that", ErrKEDAChanged, now)
		}
	}
}

// NeedLeaderElection is false: every replica watches.
func (w *KEDAWatch) NeedLeaderElection() bool { return false }

var scaledObjectPart = part[*kedav1alpha1.ScaledObject]{
	owned: func(s *kedav1alpha1.ScaledObject) any { return &s.Spec },
	set:   func(dst, src *kedav1alpha1.ScaledObject) { dst.Spec = *src.Spec.DeepCopy() },
}

var triggerAuthPart = part[*kedav1alpha1.TriggerAuthentication]{
	owned: func(a *kedav1alpha1.TriggerAuthentication) any { return &a.Spec },
	set:   func(dst, src *kedav1alpha1.TriggerAuthentication) { dst.Spec = *src.Spec.DeepCopy() },
}
