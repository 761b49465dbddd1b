package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/runs"
	runspg "sless.dev/sless/runs/postgres"
)

func TestAutoscalerHelpListsFlags(t *testing.T) {
	out, err := run("autoscaler", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`--listen string`, `(default ":8090")`,
		`--grpc string`, `(default ":9095")`,
		`--admin string`, `(default ":9090")`,
		`--buckets int`, `(default 10)`,
		`--lease-namespace string`,
		`--advertise-host string`,
		`--rabbitmq-url string`, `[SLESS_RABBITMQ_URL]`,
		`--activator-admin string`, `(default "http://sless-activator.sless-system.svc:9090")`,
		`--cron-ledger string`, `(default "sless-cron")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sless autoscaler --help lacks %q:\n%s", want, out)
		}
	}
}

// TestAutoscalerFlagErrors: bad flag values are refused before anything
// starts, naming the flag, and a broker URL's password is never quoted.
func TestAutoscalerFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"listen without port", []string{"--listen", "localhost"}, `--listen "localhost": want host:port`},
		{"grpc port out of range", []string{"--grpc", ":70000"}, `--grpc ":70000": port must be a number from 0 to 65535`},
		{"admin port not a number", []string{"--admin", ":http"}, `--admin ":http": port must be a number`},
		{"same port twice", []string{"--admin", ":8090"}, `--listen and --admin are both ":8090"`},
		{"buckets negative", []string{"--buckets=-1"}, `--buckets -1: want 0 or more`},
		{"activator-admin not http", []string{"--activator-admin", "sless-activator:9090"}, `--activator-admin "sless-activator:9090": want http://host:port`},
		{"rabbitmq-url not amqp", []string{"--rabbitmq-url", "http://guest:s3cret@host/"}, `--rabbitmq-url: `},
		{"rabbitmq-url malformed", []string{"--rabbitmq-url", "amqp://guest:s3cret@host:port/"}, `--rabbitmq-url: `},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(append([]string{"autoscaler"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sless autoscaler %v = %v, want an error with %q", tc.args, err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
	t.Run("rabbitmq-url from the environment", func(t *testing.T) {
		t.Setenv(rabbitmqURLEnv, "redis://guest:s3cret@host/")
		_, err := run("autoscaler")
		if err == nil || !strings.Contains(err.Error(), "--rabbitmq-url: ") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("sless autoscaler with a bad %s = %v, want a --rabbitmq-url error without the password", rabbitmqURLEnv, err)
		}
	})
}

// TestAutoscalerNetworkPolicy decodes config/autoscaler/networkpolicy.yaml
// strictly, checks that it admits activators to the push port, KEDA's
// namespace to the gRPC port, the other replicas to both (they pass
// pushes and calls on) and anyone to the admin port, at the
// subcommand's default ports, and that a real API server accepts it.
func TestAutoscalerNetworkPolicy(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "autoscaler", "networkpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := networkingv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode strictly: %v", err)
	}
	policy, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		t.Fatalf("decoded a %T, want a NetworkPolicy", obj)
	}
	if got := policy.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"]; got != "sless-autoscaler" {
		t.Errorf("the policy selects app.kubernetes.io/name=%q, want sless-autoscaler", got)
	}
	flags := newAutoscalerCommand().Flags()
	peers := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"app.kubernetes.io/name": "sless-autoscaler"}}}
	activators := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"app.kubernetes.io/name": "sless-activator"}}}, peers}
	keda := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "keda"}}}, peers}
	want := map[int]struct {
		flag string
		from []networkingv1.NetworkPolicyPeer
	}{
		defaultPort(t, flags.Lookup("listen").DefValue): {"--listen", activators},
		defaultPort(t, flags.Lookup("grpc").DefValue):   {"--grpc", keda},
		defaultPort(t, flags.Lookup("admin").DefValue):  {"--admin", nil},
	}
	seen := map[int]bool{}
	for _, rule := range policy.Spec.Ingress {
		for _, p := range rule.Ports {
			port := p.Port.IntValue()
			w, ok := want[port]
			switch {
			case !ok:
				t.Errorf("port %d is no default port of sless autoscaler", port)
			case ptr.Deref(p.Protocol, corev1.ProtocolTCP) != corev1.ProtocolTCP:
				t.Errorf("port %d (%s) is %s, want TCP", port, w.flag, *p.Protocol)
			case !equality.Semantic.DeepEqual(rule.From, w.from):
				t.Errorf("port %d (%s) admits %+v, want %+v", port, w.flag, rule.From, w.from)
			}
			seen[port] = true
		}
	}
	for port, w := range want {
		if !seen[port] {
			t.Errorf("the policy does not mention %s's port %d", w.flag, port)
		}
	}

	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policy.Namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, policy.DeepCopy()); err != nil {
		t.Fatalf("the API server refuses the policy: %v", err)
	}
	var stored networkingv1.NetworkPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &stored); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(stored.Spec, policy.Spec) {
		t.Errorf("stored policy spec %+v, want %+v", stored.Spec, policy.Spec)
	}
}

func defaultPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// autoscalerProcess is a `sless autoscaler` run as a real process.
type autoscalerProcess struct {
	cmd                *exec.Cmd
	exited             <-chan error
	push, admin, gaddr string
	keda               externalscaler.ExternalScalerClient
}

func startAutoscaler(t *testing.T, kubeconfig string) *autoscalerProcess {
	t.Helper()
	return startAutoscalerWith(t, kubeconfig, nil)
}

// startAutoscalerWith is startAutoscaler with env and args added.
func startAutoscalerWith(t *testing.T, kubeconfig string, env []string, args ...string) *autoscalerProcess {
	t.Helper()
	push, grpcPort, admin := testfn.FreePort(t), testfn.FreePort(t), testfn.FreePort(t)
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	args = append([]string{"autoscaler", "--listen", addr(push), "--grpc", addr(grpcPort), "--admin", addr(admin),
		"--lease-namespace", "default"}, args...)
	cmd, exited := startSless(t, nil, append([]string{"KUBECONFIG=" + kubeconfig}, env...), args...)
	p := &autoscalerProcess{cmd: cmd, exited: exited,
		push: "http://" + addr(push), admin: "http://" + addr(admin), gaddr: addr(grpcPort)}
	conn, err := grpc.NewClient(p.gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.keda = externalscaler.NewExternalScalerClient(conn)
	// Every replica serves once it is up: a test may call any as soon as
	// this returns.
	waitStatus(t, p.admin+"/healthz", http.StatusOK)
	return p
}

// ready reports whether the process answers /readyz with 200 (its watch
// synced).
func (p *autoscalerProcess) ready() bool {
	resp, err := http.Get(p.admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// post pushes what an activator would and returns the response.
func (p *autoscalerProcess) post(t *testing.T, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(p.push+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// demand reports buffered requests for default/web and pokes it.
func (p *autoscalerProcess) demand(t *testing.T, buffered int) {
	t.Helper()
	for _, push := range [][2]string{
		{wire.BufferedPath, `{"activator":"test","functions":[{"namespace":"default","name":"web","count":` + strconv.Itoa(buffered) + `}]}`},
		{wire.PokePath, `{"namespace":"default","name":"web"}`},
	} {
		if resp := p.post(t, push[0], push[1]); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%s: %s", push[0], resp.Status)
		}
	}
}

func (p *autoscalerProcess) stop(t *testing.T) {
	t.Helper()
	stopAndWait(t, "autoscaler", p.cmd, p.exited, syscall.SIGTERM, 30*time.Second)
}

// TestAutoscalerReplicasShareFunctions runs two `sless autoscaler`
// processes against a real API server: they share the buckets, five
// each; each takes pushes and KEDA's calls for every function, passing
// those of the other's functions on, and lists every function's scaling.
// When one stops, the other takes all of them and scales its functions.
func TestAutoscalerReplicasShareFunctions(t *testing.T) {
	cfg := controlplane.Start(t)
	kubeconfig := writeKubeconfig(t, cfg)
	c := controlplane.Client(t, cfg)
	createWebFunction(t, c)
	createFunction(t, c, "queued", 2, v1alpha1.Scale{Owner: v1alpha1.OwnerKEDA})

	one, two := startAutoscaler(t, kubeconfig), startAutoscaler(t, kubeconfig)
	eventually.TrueWithin(t, 30*time.Second, "the replicas to hold five buckets each", func() bool {
		return bucketsHeld(t, one) == 5 && bucketsHeld(t, two) == 5
	})
	for _, fn := range []string{"web", "queued"} {
		other := two // the replica that does not scale fn
		eventually.TrueWithin(t, 30*time.Second, "one replica to scale "+fn, func() bool {
			a, b := scales(t, one, fn), scales(t, two, fn)
			if a && b {
				t.Fatalf("both replicas scale %s", fn)
			}
			if b {
				other = one
			}
			return a || b
		})
		if _, body := fetch(t, other.push+wire.ScalingPath, ""); !strings.Contains(body, `"name":"`+fn+`"`) {
			t.Errorf("the replica that does not scale %s does not list it with its peer's: %s", fn, body)
		}
		if fn == "web" {
			// 250 waiting requests at 70 per instance: 4 instances, decided
			// by the owner from a push to the other.
			other.demand(t, 250)
			eventually.TrueWithin(t, 10*time.Second, "the owner's decision of 4 replicas", func() bool { return deploymentReplicas(t, c) == 4 })
			continue
		}
		// KEDA's call to the other replica is answered by the owner.
		ref := &externalscaler.ScaledObjectRef{Name: fn, Namespace: "default", ScalerMetadata: map[string]string{wire.KEDAFunction: fn}}
		req := &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "sless-default-" + fn}
		owner := map[bool]*autoscalerProcess{true: two, false: one}[other == one]
		eventually.TrueWithin(t, 10*time.Second, "the same answer for "+fn+" from both replicas", func() bool {
			a, err := other.keda.GetMetrics(t.Context(), req)
			if err != nil {
				t.Fatalf("GetMetrics of %s from the replica that does not scale it: %v", fn, err)
			}
			b, err := owner.keda.GetMetrics(t.Context(), req)
			return err == nil && a.String() == b.String()
		})
	}

	one.stop(t)
	eventually.TrueWithin(t, 30*time.Second, "the other replica to take every bucket", func() bool { return bucketsHeld(t, two) == 10 })
	two.demand(t, 500)
	eventually.TrueWithin(t, 10*time.Second, "its decision of 8 replicas", func() bool { return deploymentReplicas(t, c) == 8 })
	two.stop(t)
}

// bucketsHeld reads sless_autoscaler_buckets_held from p's /metrics.
func bucketsHeld(t *testing.T, p *autoscalerProcess) int {
	t.Helper()
	_, body := fetch(t, p.admin+"/metrics", "")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "sless_autoscaler_buckets_held "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// scales reports whether p itself scales default/fn: its own list, asked
// as a peer would.
func scales(t *testing.T, p *autoscalerProcess, fn string) bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.push+wire.ScalingPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(autoscaler.ForwardedHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []wire.Scaling
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list, func(s wire.Scaling) bool { return s.Namespace == "default" && s.Name == fn })
}

// TestAutoscalerAnswersKEDAAtOnce: a KEDA-owned Function is answered by
// `sless autoscaler` without an error as soon as the autoscaler knows it,
// not only after its first decision. (KEDA logged each NotFound with a
// stack trace, raised KEDAScalerFailed events and marked the ScaledObject
// not ready.)
func TestAutoscalerAnswersKEDAAtOnce(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	p := startAutoscaler(t, writeKubeconfig(t, cfg))
	eventually.TrueWithin(t, 30*time.Second, "the autoscaler to be ready", p.ready)
	createFunction(t, c, "queued", 2, v1alpha1.Scale{Owner: v1alpha1.OwnerKEDA})
	eventually.TrueWithin(t, 30*time.Second, "the autoscaler to know the function", func() bool {
		_, body := fetch(t, p.admin+"/metrics", "")
		return strings.Contains(body, "\nsless_autoscaler_functions 1\n")
	})
	ref := &externalscaler.ScaledObjectRef{Name: "queued", Namespace: "default",
		ScalerMetadata: map[string]string{wire.KEDAFunction: "queued"}}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := p.keda.IsActive(t.Context(), ref); err != nil {
			t.Fatalf("IsActive: %v, want an answer", err)
		}
		m, err := p.keda.GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "sless-default-queued"})
		if err != nil || len(m.MetricValues) != 1 {
			t.Fatalf("GetMetrics: %v %v, want one value", m, err)
		}
	}
	p.stop(t)
}

// createWebFunction creates the Function default/web, starting at zero,
// and its Deployment.
func createWebFunction(t *testing.T, c client.Client) {
	t.Helper()
	createFunction(t, c, "web", 0, v1alpha1.Scale{Initial: ptr.To(int32(0))})
}

// createFunction creates the Function default/<name>, scaled as scale,
// and its Deployment with replicas.
func createFunction(t *testing.T, c client.Client, name string, replicas int32, scale v1alpha1.Scale) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{wire.FunctionLabel: name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "fn", Image: "x"}}},
			},
		},
	}
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeGo, Image: "x", Scale: scale}}
	for _, obj := range []client.Object{dep, fn} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func deploymentReplicas(t *testing.T, c client.Client) int32 {
	t.Helper()
	var dep appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "web"}, &dep); err != nil {
		t.Fatal(err)
	}
	return *dep.Spec.Replicas
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	return writeKubeconfigIn(t, cfg, "")
}

// writeKubeconfigIn writes a kubeconfig for cfg whose context is in
// namespace (none when "").
func writeKubeconfigIn(t *testing.T, cfg *rest.Config, namespace string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"test": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "test", Namespace: namespace}},
		CurrentContext: "test",
	}, path)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Runs queued in PostgreSQL are demand to the cluster's autoscaler: a
// function at zero with runs due is given an instance, as the first
// attempt's request would give it.
func TestAutoscalerScalesForRuns(t *testing.T) {
	dbURL, _ := pgtest.DB(t)
	store, err := runspg.Open(t.Context(), dbURL, runspg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	createWebFunction(t, c)
	for range 3 {
		if _, _, err := store.Submit(t.Context(), runs.Submission{Namespace: "default", Function: "web",
			Request: runs.Request{Method: "POST", Path: "/"}, MaxAge: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	p := startAutoscalerWith(t, writeKubeconfig(t, cfg), nil, "--database-url", dbURL)
	eventually.TrueWithin(t, time.Minute, "web scaled from zero for its runs", func() bool { return deploymentReplicas(t, c) >= 1 })
	p.stop(t)
}
