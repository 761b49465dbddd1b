// Command bench-scale measures sless's control plane holding many
// Functions (issue 40): a real kube-apiserver and etcd (envtest's, built
// by `make controlplane`) with the sless CRDs, and the controller, two
// activators and two autoscalers, each the built binary in a process of
// its own as on a cluster. Functions at zero, spread over -namespaces
// namespaces, are created in steps up to each count of -functions; at
// each step it waits until every Function's status is for its generation,
// then reads each component's resident memory and Go heap. It prints each
// step's figures and each component's growth per Function: the
// least-squares slope over the steps, from none.
//
// The two autoscalers share the Functions; at the end the first is
// killed, and the time the second takes to scale all of them is printed.
// With -check it also asserts behaviour (check.go): restarts rewrite
// nothing, no error is logged, no client waits on its rate limiter.
//
// No nodes and no pods yet: the Deployments stay at zero, and nothing is
// scraped or routed.
//
//	go run ./benchmarks/cmd/bench-scale -sless bin/sless [-functions 1000,5000,10000] [-namespaces 100] [-check]
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/internal/adminauth/kubetoken"
	"sless.dev/sless/internal/controlplane"
)

func main() {
	var (
		sless      = flag.String("sless", "bin/sless", "the sless binary the components run from")
		steps      = flag.String("functions", "1000,5000,10000", "the counts of Functions measured at, in order")
		namespaces = flag.Int("namespaces", 100, "namespaces the Functions are spread over")
		timeout    = flag.Duration("timeout", 20*time.Minute, "the longest one step may take to reconcile")
		check      = flag.Bool("check", false, "also assert behaviour, exiting 1 on a failure: restarts of the controller and of an autoscaler rewrite nothing, "+
			"no component logs an error or waits on its client's rate limiter (CI runs it with 1,000 Functions)")
	)
	flag.Parse()
	counts, err := parseCounts(*steps)
	if err == nil {
		err = run(*sless, counts, *namespaces, *timeout, *check)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func parseCounts(s string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || len(counts) > 0 && n <= counts[len(counts)-1] {
			return nil, fmt.Errorf("-functions %q: want rising positive counts", s)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// point is what a step measured.
type point struct {
	functions  int
	reconciled time.Duration // from the step's first create to every status
	rss, heap  map[string]float64
}

func run(sless string, counts []int, namespaces int, timeout time.Duration, check bool) error {
	bin, err := filepath.Abs(sless)
	if err != nil {
		return err
	}
	env, err := controlplane.Environment()
	if err != nil {
		return err
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start the control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := controlplane.NewClient(cfg)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig, err := writeKubeconfig(env, dir)
	if err != nil {
		return err
	}
	ctx := context.Background()
	names := []string{"sless-system"}
	for i := range namespaces {
		names = append(names, namespace(i))
	}
	for _, ns := range names {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	// The admin token, as config/default has it made: without it the
	// components would rightly log that the admin API is refused.
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kubetoken.DefaultNamespace, Name: kubetoken.DefaultName},
		StringData: map[string]string{kubetoken.Key: rand.Text()}}); err != nil {
		return fmt.Errorf("the admin token's Secret: %w", err)
	}
	comps, err := startComponents(bin, kubeconfig, dir)
	defer stopComponents(comps)
	if err != nil {
		return err
	}
	points := []point{{rss: map[string]float64{}, heap: map[string]float64{}}}
	if err := measure(comps, &points[0]); err != nil {
		return err
	}
	made := 0
	for _, n := range counts {
		start := time.Now()
		if err := createFunctions(ctx, c, made, n, namespaces); err != nil {
			return err
		}
		made = n
		if err := awaitReconciled(ctx, c, n, timeout); err != nil {
			return err
		}
		p := point{functions: n, reconciled: time.Since(start), rss: map[string]float64{}, heap: map[string]float64{}}
		if err := measure(comps, &p); err != nil {
			return err
		}
		points = append(points, p)
		fmt.Fprintf(os.Stderr, "%d Functions reconciled in %s\n", n, p.reconciled.Round(100*time.Millisecond))
	}
	report(comps, points)
	changes, err := specChanges(ctx, c, made, namespaces, 50)
	if err != nil {
		return err
	}
	fmt.Printf("\nA spec change of one Function (its image) reached its Deployment in %s at the median, %s at the 99th percentile (%d changes, one at a time, the other Functions steady).\n",
		changes[len(changes)/2].Round(time.Millisecond), changes[len(changes)*99/100].Round(time.Millisecond), len(changes))
	if check {
		if err := restartsRewriteNothing(ctx, c, bin, comps, made); err != nil {
			return err
		}
	}
	share, took, err := failover(comps, made)
	if err != nil {
		return err
	}
	fmt.Printf("\nShared: autoscaler-1 scales %d Functions, autoscaler-2 %d. autoscaler-1 killed: autoscaler-2 scales all %d after %s.\n",
		share[0], share[1], made, took.Round(100*time.Millisecond))
	if check {
		return errors.Join(errorLogs(comps), throttled(comps))
	}
	return nil
}

func namespace(i int) string { return fmt.Sprintf("scale-%03d", i) }

// writeKubeconfig writes a kubeconfig of an administrator of the control
// plane, for the components.
func writeKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "bench-scale", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("control plane user: %w", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, raw, 0o600)
}

// component is one of sless's processes.
type component struct {
	name  string
	admin string // its health and metrics address
	args  []string
	env   []string
	log   string // its output's file, appended to across restarts
	cmd   *exec.Cmd
}

// start runs the component's process.
func (c *component) start(bin string) error {
	log, err := os.OpenFile(c.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own
	cmd := exec.Command(bin, c.args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	c.cmd = cmd
	return nil
}

// startComponents starts the controller, two activators and two
// autoscalers, as configured for a cluster but for their addresses, and
// waits for each to answer its health check.
func startComponents(bin, kubeconfig, dir string) ([]*component, error) {
	ports, err := hops.FreePorts(9)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	specs := []struct {
		name, admin string
		args        []string
	}{
		{"controller", addr(0), []string{"controller", "--image", "ghcr.io/sless-dev/sless:bench"}},
		{"activator-1", addr(1), []string{"activator", "--listen", addr(2), "--propagation-delay", "0s"}},
		{"activator-2", addr(3), []string{"activator", "--listen", addr(4), "--propagation-delay", "0s"}},
		{"autoscaler-1", addr(5), []string{"autoscaler", "--listen", addr(6), "--grpc", "127.0.0.1:0", "--activator-admin", "http://" + addr(1)}},
		{"autoscaler-2", addr(7), []string{"autoscaler", "--listen", addr(8), "--grpc", "127.0.0.1:0", "--activator-admin", "http://" + addr(1)}},
	}
	var comps []*component
	for _, s := range specs {
		c := &component{name: s.name, admin: s.admin, args: append(s.args, "--admin", s.admin),
			env: append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE=sless-system", "POD_NAME="+s.name, "POD_IP=127.0.0.1"),
			log: filepath.Join(dir, s.name+".log")}
		if err := c.start(bin); err != nil {
			return comps, err
		}
		comps = append(comps, c)
	}
	for _, c := range comps {
		if err := awaitHealthy(c); err != nil {
			return comps, err
		}
	}
	return comps, nil
}

func awaitHealthy(c *component) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + c.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(c.log)
	return fmt.Errorf("%s: not healthy within a minute; its log ends:\n%s", c.name, log[max(0, len(log)-2000):])
}

func stopComponents(comps []*component) {
	for _, c := range comps {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	}
}

// createFunctions creates Functions from..to-1, at zero (scale.initial 0),
// round the namespaces, 16 at once.
func createFunctions(ctx context.Context, c client.Client, from, to, namespaces int) error {
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fn-%05d", i), Namespace: namespace(i % namespaces)},
					Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "registry.example.com/fn:1",
						Scale: v1alpha1.Scale{Initial: ptr.To[int32](0)}}}
				if err := c.Create(ctx, fn); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, fmt.Errorf("create %s/%s: %w", fn.Namespace, fn.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return firstErr
}

// awaitReconciled waits until n Functions have a status for their
// generation, listing them a page at a time.
func awaitReconciled(ctx context.Context, c client.Client, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := reconciled(ctx, c)
		if err != nil {
			return err
		}
		if done == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Functions reconciled after %s", done, n, timeout)
		}
		time.Sleep(time.Second)
	}
}

func reconciled(ctx context.Context, c client.Client) (int, error) {
	done := 0
	var list v1alpha1.FunctionList
	for cont := ""; ; {
		if err := c.List(ctx, &list, client.Limit(1000), client.Continue(cont)); err != nil {
			return 0, err
		}
		for i := range list.Items {
			if fn := &list.Items[i]; fn.Status.ObservedGeneration == fn.Generation {
				done++
			}
		}
		if cont = list.Continue; cont == "" {
			return done, nil
		}
	}
}

// measure reads each component's resident memory and Go heap in use, the
// least of five reads a second apart: what it holds, not what it has not
// yet collected.
func measure(comps []*component, p *point) error {
	for range 5 {
		for _, c := range comps {
			rss, err := residentKiB(c.cmd.Process.Pid)
			if err != nil {
				return err
			}
			heap, err := heapKiB(c.admin)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			p.rss[c.name] = least(p.rss, c.name, rss)
			p.heap[c.name] = least(p.heap, c.name, heap)
		}
		time.Sleep(time.Second)
	}
	return nil
}

func least(m map[string]float64, k string, v float64) float64 {
	if old, ok := m[k]; ok && old < v {
		return old
	}
	return v
}

// residentKiB is a process's resident set, from /proc.
func residentKiB(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// heapKiB is a component's go_memstats_heap_inuse_bytes, from its metrics.
func heapKiB(admin string) (float64, error) {
	v, err := metricSum(admin, "go_memstats_heap_inuse_bytes", "")
	if err == nil && v == 0 {
		err = errors.New("no go_memstats_heap_inuse_bytes in its metrics")
	}
	return v / 1024, err
}

// metricSum adds up the series of the family name on a component's
// /metrics whose labels contain match (all, for ""); 0 when there are
// none.
func metricSum(admin, name, match string) (float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") || !strings.Contains(rest, match) {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// failover waits until the two autoscalers share the n Functions, five
// buckets each, then kills the first, as a node failure would, and
// returns how long the second took to scale all of them.
func failover(comps []*component, n int) (share [2]int, took time.Duration, err error) {
	var scalers []*component
	for _, c := range comps {
		if strings.HasPrefix(c.name, "autoscaler-") {
			scalers = append(scalers, c)
		}
	}
	holding := func(c *component, buckets, functions int) bool {
		b, err1 := metricSum(c.admin, "sless_autoscaler_buckets_held", "")
		f, err2 := metricSum(c.admin, "sless_autoscaler_functions", "")
		return err1 == nil && err2 == nil && int(b) == buckets && (functions < 0 || int(f) == functions)
	}
	if err := until(2*time.Minute, func() bool { return holding(scalers[0], 5, -1) && holding(scalers[1], 5, -1) }); err != nil {
		return share, 0, fmt.Errorf("the autoscalers to hold five buckets each: %w", err)
	}
	for i, c := range scalers {
		f, err := metricSum(c.admin, "sless_autoscaler_functions", "")
		if err != nil {
			return share, 0, err
		}
		share[i] = int(f)
	}
	killed := time.Now()
	if err := scalers[0].cmd.Process.Kill(); err != nil {
		return share, 0, err
	}
	_ = scalers[0].cmd.Wait()
	if err := until(time.Minute, func() bool { return holding(scalers[1], 10, n) }); err != nil {
		return share, 0, fmt.Errorf("the second autoscaler to take every function: %w", err)
	}
	return share, time.Since(killed), nil
}

// until polls cond every 100 ms for up to within.
func until(within time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return fmt.Errorf("not within %s", within)
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(ys))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	return num / den
}

func report(comps []*component, points []point) {
	fmt.Printf("| Functions | reconciled in |")
	for _, c := range comps {
		fmt.Printf(" %s RSS (MiB) | heap (MiB) |", c.name)
	}
	fmt.Printf("\n|---|---|%s\n", strings.Repeat("---|---|", len(comps)))
	for _, p := range points {
		took := "-"
		if p.functions > 0 {
			took = p.reconciled.Round(100 * time.Millisecond).String()
		}
		fmt.Printf("| %d | %s |", p.functions, took)
		for _, c := range comps {
			fmt.Printf(" %.1f | %.1f |", p.rss[c.name]/1024, p.heap[c.name]/1024)
		}
		fmt.Println()
	}
	xs, counts := make([]float64, len(points)), make([]string, len(points))
	for i, p := range points {
		xs[i], counts[i] = float64(p.functions), strconv.Itoa(p.functions)
	}
	fmt.Printf("\n| per Function (slope over %s Functions) | RSS (KiB) | heap (KiB) |\n|---|---|---|\n", strings.Join(counts, ", "))
	for _, c := range comps {
		rss, heap := make([]float64, len(points)), make([]float64, len(points))
		for i, p := range points {
			rss[i], heap[i] = p.rss[c.name], p.heap[c.name]
		}
		fmt.Printf("| %s | %.1f | %.1f |\n", c.name, slope(xs, rss), slope(xs, heap))
	}
}
