package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/controller"
	"sless.dev/sless/internal/wire"
)

// restartsRewriteNothing restarts the controller, then an autoscaler, as a
// rollout would (SIGTERM, then the same command), waits until each has
// taken up the n Functions again, and fails if either wrote any Function,
// Deployment or Service: a restart must find everything as it should be.
func restartsRewriteNothing(ctx context.Context, c client.Client, bin string, comps []*component, n int) error {
	for _, name := range []string{"controller", "autoscaler-2"} {
		comp := byName(comps, name)
		before, err := versions(ctx, c)
		if err != nil {
			return err
		}
		if err := comp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		_ = comp.cmd.Wait()
		if err := comp.start(bin); err != nil {
			return err
		}
		if err := awaitHealthy(comp); err != nil {
			return err
		}
		if err := until(5*time.Minute, func() bool { return settled(comps, comp, n) }); err != nil {
			return fmt.Errorf("%s restarted, taking up the %d Functions again: %w", name, n, err)
		}
		after, err := versions(ctx, c)
		if err != nil {
			return err
		}
		if changed := changedKeys(before, after); len(changed) > 0 {
			return fmt.Errorf("a restart of the %s rewrote %d objects, with nothing to change: %s", name, len(changed), strings.Join(changed[:min(10, len(changed))], ", "))
		}
		fmt.Fprintf(os.Stderr, "%s restarted: nothing rewritten\n", name)
	}
	return nil
}

func byName(comps []*component, name string) *component {
	for _, c := range comps {
		if c.name == name {
			return c
		}
	}
	return nil
}

// settled reports whether a restarted component has taken up the n
// Functions: the controller reconciled each with its queue empty; an
// autoscaler holds its five buckets (its peer the other five), with every
// function scaled by one of the two, and has decided on them twice.
func settled(comps []*component, comp *component, n int) bool {
	if comp.name == "controller" {
		done, err1 := metricSum(comp.admin, "controller_runtime_reconcile_total", `controller="function"`)
		depth, err2 := metricSum(comp.admin, "workqueue_depth", `name="function"`)
		return err1 == nil && err2 == nil && int(done) >= n && depth == 0
	}
	total := 0
	for _, a := range comps {
		if !strings.HasPrefix(a.name, "autoscaler-") {
			continue
		}
		buckets, err1 := metricSum(a.admin, "sless_autoscaler_buckets_held", "")
		fns, err2 := metricSum(a.admin, "sless_autoscaler_functions", "")
		if err1 != nil || err2 != nil || buckets != 5 {
			return false
		}
		total += int(fns)
	}
	steps, err := metricSum(comp.admin, "sless_autoscaler_steps_total", "")
	return err == nil && total == n && steps >= 4
}

// versions are the resource versions of every Function, and of every
// Deployment and Service labelled wire.FunctionLabel, by kind and key:
// their metadata alone, a page at a time.
func versions(ctx context.Context, c client.Client) (map[string]string, error) {
	out := map[string]string{}
	lists := []struct {
		gvk  schema.GroupVersionKind
		opts []client.ListOption
	}{
		{v1alpha1.GroupVersion.WithKind("FunctionList"), nil},
		{appsv1.SchemeGroupVersion.WithKind("DeploymentList"), []client.ListOption{client.HasLabels{wire.FunctionLabel}}},
		{corev1.SchemeGroupVersion.WithKind("ServiceList"), []client.ListOption{client.HasLabels{wire.FunctionLabel}}},
	}
	for _, l := range lists {
		kind := strings.TrimSuffix(l.gvk.Kind, "List")
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(l.gvk)
		for cont := ""; ; {
			if err := c.List(ctx, list, append(l.opts, client.Limit(1000), client.Continue(cont))...); err != nil {
				return nil, fmt.Errorf("list %ss: %w", kind, err)
			}
			for _, o := range list.Items {
				out[kind+" "+o.Namespace+"/"+o.Name] = o.ResourceVersion
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
	}
	return out, nil
}

// changedKeys are the keys of before whose version differs in after, or
// that are gone, and those new in after, sorted.
func changedKeys(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if after[k] != v {
			out = append(out, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// klogError is a line klog wrote at error level (E1208 12:00:00.000000 ...).
var klogError = regexp.MustCompile(`^E\d{4} `)

// errorLogs fails with the error lines the components logged: slog's
// level ERROR, klog's E lines.
func errorLogs(comps []*component) error {
	var errs []error
	for _, c := range comps {
		f, err := os.Open(c.log)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, `"level":"ERROR"`) || klogError.MatchString(line) {
				errs = append(errs, fmt.Errorf("%s logged: %s", c.name, line[:min(len(line), 500)]))
			}
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// throttled fails when a live component's Kubernetes client waited on its
// own rate limiter: there is none (docs/scale.md), so any wait is a
// regression. The activators do not serve controller-runtime's metrics.
func throttled(comps []*component) error {
	var errs []error
	for _, c := range comps {
		if c.cmd.ProcessState != nil || strings.HasPrefix(c.name, "activator") {
			continue
		}
		waits, err := metricSum(c.admin, "rest_client_rate_limiter_duration_seconds_count", "")
		if err != nil {
			return err
		}
		if waits > 0 {
			errs = append(errs, fmt.Errorf("%s's Kubernetes client waited on its rate limiter %v times", c.name, waits))
		}
	}
	return errors.Join(errs...)
}

// specChanges changes the image of k of the n Functions, spread over
// them, one at a time while the others are steady, and returns how long
// each change took to reach its Deployment (its spec-hash annotation).
func specChanges(ctx context.Context, c client.Client, n, namespaces, k int) ([]time.Duration, error) {
	var took []time.Duration
	for i := range k {
		idx := i * (n / k)
		key := client.ObjectKey{Namespace: namespace(idx % namespaces), Name: fmt.Sprintf("fn-%05d", idx)}
		var dep appsv1.Deployment
		if err := c.Get(ctx, key, &dep); err != nil {
			return nil, fmt.Errorf("deployment %s: %w", key, err)
		}
		hash := dep.Annotations[controller.SpecHashAnnotation]
		var fn v1alpha1.Function
		if err := c.Get(ctx, key, &fn); err != nil {
			return nil, err
		}
		patch := client.MergeFrom(fn.DeepCopy())
		fn.Spec.Image = fmt.Sprintf("registry.example.com/fn:%d", time.Now().UnixNano())
		start := time.Now()
		if err := c.Patch(ctx, &fn, patch); err != nil {
			return nil, fmt.Errorf("change %s: %w", key, err)
		}
		err := until(time.Minute, func() bool {
			return c.Get(ctx, key, &dep) == nil && dep.Annotations[controller.SpecHashAnnotation] != hash
		})
		if err != nil {
			return nil, fmt.Errorf("the change of %s to reach its Deployment: %w", key, err)
		}
		took = append(took, time.Since(start))
		// Its status too, before the next: the Functions are steady again.
		err = until(time.Minute, func() bool {
			return c.Get(ctx, key, &fn) == nil && fn.Status.ObservedGeneration == fn.Generation
		})
		if err != nil {
			return nil, fmt.Errorf("the status of %s after its change: %w", key, err)
		}
	}
	slices.Sort(took)
	return took, nil
}
