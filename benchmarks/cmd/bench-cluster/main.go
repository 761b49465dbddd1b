// Command bench-cluster measures sless on the one-node test cluster (make
// cluster deploy), each figure against its floor in the same run:
//
//   - cold start per runtime: a request to a function at zero through the
//     activator, from sent to answered, against the floor: a copy of the
//     function's own Deployment (the same image and sidecar, outside sless)
//     scaled 0→1 by hand until its pod first answers on its IP;
//
//   - warm throughput and p50 through the activator, against requests to
//     the pod's IP (its queue-proxy) in the same run;
//
//   - sless deploy of the samples with warm caches and, with -restart, a warm
//     start of the cluster and make deploy.
//
//     go run ./benchmarks/cmd/bench-cluster [-runs 10] [-duration 10s] [-restart]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/deploy"
	"sless.dev/sless/fnimage"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/load"
	"sless.dev/sless/runtimes"
)

type options struct {
	kubeconfig, registry string
	runs                 int
	duration             time.Duration
	restart              bool
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "bin/cluster/kubeconfig", "the test cluster's kubeconfig")
	flag.StringVar(&o.registry, "registry", "127.0.0.1:5000", "the test cluster's registry")
	flag.IntVar(&o.runs, "runs", 10, "cold starts per runtime, each beside one of its floor")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "each warm throughput run")
	flag.BoolVar(&o.restart, "restart", false, "also time a warm restart of the cluster and make deploy (stops the cluster first)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster:", err)
		os.Exit(1)
	}
}

// bench is what every measure uses.
type bench struct {
	c         client.Client
	o         options
	ns        string
	activator string
	builder   *fnimage.Builder
}

func run(ctx context.Context, o options) error {
	if o.restart {
		if err := timeCommands(ctx); err != nil {
			return err
		}
	}
	b, err := connect(ctx, o)
	if err != nil {
		return err
	}
	if err := b.timeSamplesDeploy(ctx); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}
	if err := b.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	defer func() { _ = b.c.Delete(context.Background(), ns) }()
	fmt.Printf("\ncold starts, %d of each (p50, min, max)\n", o.runs)
	fmt.Printf("%-8s %-28s %-28s %s\n", "runtime", "through sless (at zero)", "floor (Deployment 0->1)", "sless - floor (p50)")
	for _, rt := range []v1alpha1.Runtime{v1alpha1.RuntimeGo, v1alpha1.RuntimePython, v1alpha1.RuntimeNode} {
		if err := b.coldStarts(ctx, rt); err != nil {
			return fmt.Errorf("%s cold starts: %w", rt, err)
		}
	}
	return b.warm(ctx)
}

func connect(ctx context.Context, o options) (*bench, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-activator"}, &svc); err != nil {
		return nil, fmt.Errorf("sless is not installed (make deploy): %w", err)
	}
	cache, err := filepath.Abs("bin/bench-cache")
	if err != nil {
		return nil, err
	}
	return &bench{c: c, o: o, ns: "bench-cluster", activator: "http://" + svc.Spec.ClusterIP,
		builder: &fnimage.Builder{Runtimes: runtimes.Options{CacheDir: cache}, BaseRegistry: o.registry + "/sless"}}, nil
}

// timeCommands times a warm start of the cluster (stopped first) and make
// deploy, as a developer runs them.
func timeCommands(ctx context.Context) error {
	for _, c := range [][]string{{"make", "cluster-down"}, {"make", "cluster"}, {"make", "deploy"}} {
		start := time.Now()
		cmd := exec.CommandContext(ctx, c[0], c[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(c, " "), err, out)
		}
		fmt.Printf("%-18s %s\n", strings.Join(c, " "), time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// timeSamplesDeploy times sless deploy of the samples, the images' builds
// cached, twice: the first pushes what changed since the last run.
func (b *bench) timeSamplesDeploy(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-samples"}}
	if err := b.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	defer func() { _ = b.c.Delete(context.Background(), ns) }()
	fns, err := deploy.Load("config/samples/functions", ns.Name)
	if err != nil {
		return err
	}
	for i := range 2 {
		start := time.Now()
		if _, err := deploy.Run(ctx, fns, deploy.Options{Registry: b.o.registry, Builder: b.builder, Client: b.c}); err != nil {
			return err
		}
		fmt.Printf("sless deploy of the %d samples (%d): %s\n", len(fns), i+1, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// function deploys the hello sample of rt as name with scale.
func (b *bench) function(ctx context.Context, rt v1alpha1.Runtime, name, scale string) error {
	handler := map[v1alpha1.Runtime]string{v1alpha1.RuntimeGo: "Handle", v1alpha1.RuntimePython: "main.handle", v1alpha1.RuntimeNode: "index.handle"}[rt]
	src, err := filepath.Abs("config/samples/functions/hello-" + string(rt))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, name+".yaml")
	manifest := fmt.Sprintf("apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: %s}\nspec: {runtime: %s, source: %s, handler: %s, scale: %s}\n",
		name, rt, src, handler, scale)
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		return err
	}
	fns, err := deploy.Load(file, b.ns)
	if err != nil {
		return err
	}
	_, err = deploy.Run(ctx, fns, deploy.Options{Registry: b.o.registry, Builder: b.builder, Client: b.c})
	return err
}

// coldStarts measures rt's cold starts through sless and its floor, one of
// each in turn.
func (b *bench) coldStarts(ctx context.Context, rt v1alpha1.Runtime) error {
	name := "cold-" + string(rt)
	if err := b.function(ctx, rt, name, "{initial: 0, window: 6s, scaleToZeroGracePeriod: 0s}"); err != nil {
		return err
	}
	floor, err := b.floorDeployment(ctx, name)
	if err != nil {
		return err
	}
	var sless, bare []time.Duration
	for range b.o.runs {
		if err := b.waitPods(ctx, map[string]string{wire.FunctionLabel: name}, 0); err != nil {
			return err
		}
		d, err := b.slessColdStart(ctx, name)
		if err != nil {
			return err
		}
		sless = append(sless, d)
		if d, err = b.floorColdStart(ctx, floor); err != nil {
			return err
		}
		bare = append(bare, d)
	}
	fmt.Printf("%-8s %-28s %-28s %s\n", rt, stats(sless), stats(bare), (p50(sless) - p50(bare)).Round(time.Millisecond))
	return nil
}

// slessColdStart is one request to the function at zero through the
// activator.
func (b *bench) slessColdStart(ctx context.Context, name string) (time.Duration, error) {
	start := time.Now()
	if err := get(ctx, b.activator+"/fn/"+b.ns+"/"+name); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// floorDeployment copies the function's Deployment (its image and sidecar)
// under labels of its own, outside sless, at zero.
func (b *bench) floorDeployment(ctx context.Context, name string) (*appsv1.Deployment, error) {
	var fd appsv1.Deployment
	if err := waitGet(ctx, b.c, client.ObjectKey{Namespace: b.ns, Name: name}, &fd); err != nil {
		return nil, err
	}
	labels := map[string]string{"bench": "floor-" + name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "floor-" + name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: *fd.Spec.Template.DeepCopy()}}
	d.Spec.Template.Labels = labels
	if err := b.c.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return d, nil
}

// floorColdStart scales the floor Deployment 0→1 and waits for its pod's
// first answer on its IP, then scales it back to zero.
func (b *bench) floorColdStart(ctx context.Context, d *appsv1.Deployment) (time.Duration, error) {
	start := time.Now()
	if err := b.scale(ctx, d, 1); err != nil {
		return 0, err
	}
	var took time.Duration
	for took == 0 {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var pods corev1.PodList
		if err := b.c.List(ctx, &pods, client.InNamespace(b.ns), client.MatchingLabels(d.Spec.Template.Labels)); err != nil {
			return 0, err
		}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil && get(ctx, fmt.Sprintf("http://%s:%d/", p.Status.PodIP, wire.ServingPort)) == nil {
				took = time.Since(start)
			}
		}
		time.Sleep(5 * time.Millisecond) // a poll of the pod, as a probe would
	}
	if err := b.scale(ctx, d, 0); err != nil {
		return 0, err
	}
	return took, b.waitPods(ctx, d.Spec.Template.Labels, 0)
}

func (b *bench) scale(ctx context.Context, d *appsv1.Deployment, n int32) error {
	patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
	return b.c.Patch(ctx, d, patch)
}

// waitPods waits until the pods with labels number n.
func (b *bench) waitPods(ctx context.Context, labels map[string]string, n int) error {
	for {
		var pods corev1.PodList
		if err := b.c.List(ctx, &pods, client.InNamespace(b.ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		if len(pods.Items) == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// warm loads a warm Go function closed-loop through the activator and on
// its pod's IP, in turn.
func (b *bench) warm(ctx context.Context) error {
	if err := b.function(ctx, v1alpha1.RuntimeGo, "warm-go", "{min: 1, initial: 1, max: 1}"); err != nil {
		return err
	}
	url := b.activator + "/fn/" + b.ns + "/warm-go"
	for get(ctx, url) != nil {
		time.Sleep(100 * time.Millisecond)
	}
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(b.ns), client.MatchingLabels{wire.FunctionLabel: "warm-go"}); err != nil || len(pods.Items) != 1 {
		return fmt.Errorf("the warm function's pod: %v", err)
	}
	direct := fmt.Sprintf("http://%s:%d/", pods.Items[0].Status.PodIP, wire.ServingPort)
	fmt.Printf("\nwarm, closed loop of 32 connections for %s each (Go hello)\n%-22s %12s %10s %10s\n", b.o.duration, "path", "answers/s", "p50", "p99")
	for _, target := range []struct{ name, url string }{{"pod IP (queue-proxy)", direct}, {"activator", url}, {"pod IP (queue-proxy)", direct}, {"activator", url}} {
		r, err := load.Run(ctx, load.Options{URL: target.url, Connections: 32, Duration: b.o.duration, Warmup: 2 * time.Second, AllowRemote: true})
		if err != nil {
			return err
		}
		if r.Errors > 0 || r.Codes[200] != r.Requests {
			return fmt.Errorf("%s: codes %v, %d errors", target.name, r.Codes, r.Errors)
		}
		fmt.Printf("%-22s %12.0f %10s %10s\n", target.name, r.Throughput, r.Latency.P50.Round(time.Microsecond), r.Latency.P99.Round(time.Microsecond))
	}
	return nil
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// get fails unless url answers 200.
func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func waitGet(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object) error {
	for {
		err := c.Get(ctx, key, obj)
		if err == nil || !apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func stats(ds []time.Duration) string {
	return fmt.Sprintf("%s (%s-%s)", p50(ds).Round(time.Millisecond), slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
