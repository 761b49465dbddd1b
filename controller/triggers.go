package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/amqpurl"
	"sless.dev/sless/internal/wire"
)

// triggerRecheck is how soon a Function with a failing trigger is checked
// again, and how long a check's outcome is kept.
const triggerRecheck = 30 * time.Second

// BrokerChecker reaches a RabbitMQ trigger's broker and queue.
type BrokerChecker interface {
	Check(ctx context.Context, url, queue string) error
}

// checkTriggers sets status.Triggers and TriggersReady from each enabled RabbitMQ trigger: its
// Secret and URL, read past the cache, then its broker and queue. It
// reports whether one fails.
func (r *FunctionReconciler) checkTriggers(ctx context.Context, fn *v1alpha1.Function, status *v1alpha1.FunctionStatus) (failing bool) {
	var problems []string
	status.Triggers = nil
	for _, t := range fn.Spec.Triggers {
		if t.RabbitMQ == nil || !t.IsEnabled() {
			continue
		}
		ts := v1alpha1.TriggerStatus{Name: t.Name, Ready: true}
		if err := r.checkTrigger(ctx, fn.Namespace, t.RabbitMQ); err != nil {
			ts.Ready, ts.Message = false, err.Error()
			problems = append(problems, fmt.Sprintf("trigger %s: %v", t.Name, err))
		}
		status.Triggers = append(status.Triggers, ts)
	}
	switch {
	case len(status.Triggers) == 0:
		meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionTriggersReady)
	case len(problems) > 0:
		setCondition(status, fn.Generation, metav1.Condition{Type: v1alpha1.ConditionTriggersReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonTriggerFailing, Message: strings.Join(problems, "; ")})
	default:
		setCondition(status, fn.Generation, metav1.Condition{Type: v1alpha1.ConditionTriggersReady, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonTriggersReachable, Message: fmt.Sprintf("%d RabbitMQ trigger(s): broker and queue reachable", len(status.Triggers))})
	}
	return len(problems) > 0
}

func (r *FunctionReconciler) checkTrigger(ctx context.Context, namespace string, t *v1alpha1.RabbitMQTrigger) error {
	u, err := BrokerURL(ctx, r.apiReader, namespace, t.ConnectionSecret)
	if err != nil {
		return err
	}
	return r.opts.Brokers.Check(ctx, u, t.Queue)
}

// BrokerURL reads the broker URL of a RabbitMQ trigger from its
// connectionSecret (wire.AMQPURLKey), and checks that it is an AMQP URL;
// its errors never quote it, as it holds a password.
func BrokerURL(ctx context.Context, r client.Reader, namespace, secret string) (string, error) {
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("the Secret %s not found", secret)
		}
		return "", fmt.Errorf("the Secret %s: %w", secret, err)
	}
	u := string(s.Data[wire.AMQPURLKey])
	if u == "" {
		return "", fmt.Errorf("the Secret %s has no key %s", secret, wire.AMQPURLKey)
	}
	if amqpurl.Check(u) != nil {
		return "", fmt.Errorf("the Secret %s: %s is not an AMQP URL", secret, wire.AMQPURLKey)
	}
	return u, nil
}

// AMQPChecker dials the broker and declares the queue passively, keeping
// each outcome for a while so that reconciles do not dial each time.
type AMQPChecker struct {
	mu   sync.Mutex
	seen map[[2]string]checked
}

type checked struct {
	err error
	at  time.Time
}

// NewAMQPChecker returns a checker with nothing checked yet.
func NewAMQPChecker() *AMQPChecker { return &AMQPChecker{seen: map[[2]string]checked{}} }

// Check reports why queue on the broker at rawURL cannot be consumed:
// the broker unreachable, the credentials refused, the queue missing.
func (c *AMQPChecker) Check(_ context.Context, rawURL, queue string) error {
	k := [2]string{rawURL, queue}
	c.mu.Lock()
	if was, ok := c.seen[k]; ok && time.Since(was.at) < triggerRecheck {
		c.mu.Unlock()
		return was.err
	}
	c.mu.Unlock()
	err := check(rawURL, queue)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) > 10_000 { // bounded: forget all, check again
		clear(c.seen)
	}
	c.seen[k] = checked{err: err, at: time.Now()}
	return err
}

func check(rawURL, queue string) error {
	broker := amqpurl.Redact(rawURL)
	conn, err := amqp.DialConfig(rawURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.AccessRefused {
			return fmt.Errorf("broker %s refused the credentials", broker)
		}
		return fmt.Errorf("broker %s: %w", broker, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker %s: %w", broker, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		if amqpErr, ok := errors.AsType[*amqp.Error](err); ok && amqpErr.Code == amqp.NotFound {
			return fmt.Errorf("queue %q not found on %s", queue, broker)
		}
		return fmt.Errorf("queue %q on %s: %w", queue, broker, err)
	}
	return nil
}
