package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sless.dev/sless/apis/v1alpha1"
)

// SpecHashAnnotation holds a hash of what the controller last wrote into an
// object. Comparing desired and live objects field by field cannot see a
// field the controller stopped setting (a removed env var or limit), since
// the live object also holds fields the API server filled in; the hash can.
const SpecHashAnnotation = "sless.dev/spec-hash"

// part describes the fields of one kind of object the controller owns.
type part[T client.Object] struct {
	// owned returns them, for hashing and comparing.
	owned func(T) any
	// set copies them from src onto dst, keeping the rest of dst.
	set func(dst, src T)
}

// conflictError reports that an object the controller would create exists
// and belongs to someone else; the controller leaves it alone.
type conflictError struct {
	kind, name string
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s exists and is not controlled by this Function; delete or rename it", e.kind, e.name)
}

// ensure makes the object desired describes exist with the owned fields of
// desired, and returns the live object. It writes only when the owned
// fields differ or the hash of what was last written changed: fields the
// API server defaults and fields others own (a Deployment's replicas) are
// never compared, so they cause no writes and are never overwritten.
// existing is an empty object of the same type, filled by the read.
func ensure[T client.Object](ctx context.Context, r *FunctionReconciler, fn *v1alpha1.Function, desired, existing T, p part[T]) (T, error) {
	kind := kindOf(desired)
	hash, err := specHash(desired, p.owned(desired))
	if err != nil {
		return existing, err
	}
	desired.SetAnnotations(merged(desired.GetAnnotations(), map[string]string{SpecHashAnnotation: hash}))
	if err := controllerutil.SetControllerReference(fn, desired, r.client.Scheme()); err != nil {
		return existing, fmt.Errorf("owner reference on %s %s: %w", kind, desired.GetName(), err)
	}
	created, err := r.createOrRead(ctx, fn, desired, existing)
	if err != nil || created {
		return desired, err
	}
	if !metav1.IsControlledBy(existing, fn) {
		return existing, &conflictError{kind: kind, name: desired.GetName()}
	}
	// The hash is among the desired annotations.
	if containsAll(existing.GetLabels(), desired.GetLabels()) &&
		containsAll(existing.GetAnnotations(), desired.GetAnnotations()) &&
		equality.Semantic.DeepDerivative(p.owned(desired), p.owned(existing)) {
		return existing, nil
	}
	updated := existing.DeepCopyObject().(T)
	p.set(updated, desired)
	updated.SetLabels(merged(updated.GetLabels(), desired.GetLabels()))
	updated.SetAnnotations(merged(updated.GetAnnotations(), desired.GetAnnotations()))
	if err := r.client.Patch(ctx, updated, client.MergeFrom(existing)); err != nil {
		return existing, fmt.Errorf("update %s %s/%s: %w", kind, desired.GetNamespace(), desired.GetName(), err)
	}
	r.events.Eventf(fn, updated, corev1.EventTypeNormal, "Updated", "Update", "Updated %s %s", kind, desired.GetName())
	return updated, nil
}

// createOrRead reads the live object into existing, or creates desired
// when there is none and reports so.
func (r *FunctionReconciler) createOrRead(ctx context.Context, fn *v1alpha1.Function, desired, existing client.Object) (created bool, err error) {
	kind, key := kindOf(desired), client.ObjectKeyFromObject(desired)
	err = r.client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = r.client.Create(ctx, desired)
		if err == nil {
			r.events.Eventf(fn, desired, corev1.EventTypeNormal, "Created", "Create", "Created %s %s", kind, desired.GetName())
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create %s %s: %w", kind, key, err)
		}
		// Not in the cache, yet there: a stale cache, or not ours (the
		// cache holds labelled objects only).
		err = r.apiReader.Get(ctx, key, existing)
	}
	if err != nil {
		return false, fmt.Errorf("get %s %s: %w", kind, key, err)
	}
	return false, nil
}

// specHash is a short hash of the labels, annotations and owned fields of
// a desired object. JSON encodes map keys in order, so equal inputs hash
// equally.
func specHash(obj client.Object, owned any) (string, error) {
	b, err := json.Marshal(struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		Owned       any               `json:"owned"`
	}{obj.GetLabels(), obj.GetAnnotations(), owned})
	if err != nil {
		return "", fmt.Errorf("hash spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// merged is base with over's entries on top, in a new map.
func merged(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	maps.Copy(out, base)
	maps.Copy(out, over)
	return out
}

// kindOf is the Go type name of an object, its kind, for messages: typed
// objects read by the client carry no TypeMeta.
func kindOf(obj client.Object) string {
	return reflect.TypeOf(obj).Elem().Name()
}
