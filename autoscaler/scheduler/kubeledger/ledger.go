// Package kubeledger keeps the cron scheduler's ledger in a ConfigMap, so
// that every autoscaler replica, and the next leader after a change,
// agree on which fires were sent: each fire is claimed by one compare-and-
// swap of the ConfigMap (its resourceVersion), and so is sent once.
package kubeledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxAttempts bounds the compare-and-swaps of one claim that lose to
// another writer.
const maxAttempts = 10

// Ledger is a scheduler.Ledger in the ConfigMap Namespace/Name, created
// when missing. Each key is one data entry holding its last fire
// (RFC 3339). A ConfigMap holds up to 1 MiB: some 15,000 triggers.
type Ledger struct {
	Client          client.Client
	Namespace, Name string
}

// dataKey maps a scheduler key, namespace/function/trigger, to a ConfigMap
// data key: names never hold "_", so the mapping is one to one.
func dataKey(key string) string { return strings.ReplaceAll(key, "/", "_") }

// Claim records scheduled as key's last fire, unless a fire at or after it
// is recorded: ok tells the caller to send it.
func (l *Ledger) Claim(ctx context.Context, key string, scheduled time.Time) (ok bool, err error) {
	k := dataKey(key)
	for range maxAttempts {
		cm, err := l.get(ctx)
		if err != nil {
			return false, err
		}
		if last, err := parse(cm.Data[k]); err != nil {
			return false, fmt.Errorf("ledger %s/%s key %s: %w", l.Namespace, l.Name, k, err)
		} else if !scheduled.After(last) {
			return false, nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[k] = scheduled.UTC().Format(time.RFC3339Nano)
		err = l.Client.Update(ctx, cm) // fails on a resourceVersion another writer moved on
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsConflict(err):
			continue
		default:
			return false, fmt.Errorf("ledger %s/%s: %w", l.Namespace, l.Name, err)
		}
	}
	return false, fmt.Errorf("ledger %s/%s: %d conflicting writes in a row", l.Namespace, l.Name, maxAttempts)
}

// Last is key's last fire claimed, zero when none.
func (l *Ledger) Last(ctx context.Context, key string) (time.Time, error) {
	cm, err := l.get(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return parse(cm.Data[dataKey(key)])
}

// get reads the ConfigMap, creating it when missing.
func (l *Ledger) get(ctx context.Context) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "sless"}}}
		if err = l.Client.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			err = l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ledger %s/%s: %w", l.Namespace, l.Name, err)
	}
	return cm, nil
}

func parse(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, v)
}
