package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

// TestActivatorCommand runs `sless activator` as a real process against a
// real API server: it serves a Function created there (a request for it
// waits for an instance and times out), lists it on the admin API, refuses
// the admin API without the token (SLESS_ADMIN_TOKEN, which replaces the
// Secret), and exits 0 on SIGTERM.
func TestActivatorCommand(t *testing.T) {
	cfg := controlplane.Start(t)
	kubeconfig := writeKubeconfig(t, cfg)
	c := controlplane.Client(t, cfg)
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "hi", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeNode, Image: "x", TimeoutSeconds: 1}}
	if err := c.Create(context.Background(), fn); err != nil {
		t.Fatal(err)
	}

	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + kubeconfig, "SLESS_ADMIN_TOKEN=tok"}, "activator",
		"--listen", "127.0.0.1:"+strconv.Itoa(serving), "--admin", "127.0.0.1:"+strconv.Itoa(admin), "--drain", "5s",
		"--propagation-delay", "0s")

	adminURL := "http://127.0.0.1:" + strconv.Itoa(admin)
	waitStatus(t, adminURL+"/readyz", http.StatusOK)
	code, body := fetch(t, "http://127.0.0.1:"+strconv.Itoa(serving)+"/fn/default/hi/", "")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "timed out waiting for an instance") {
		t.Errorf("request for a function without instances: %d %s, want 504 after its 1s timeout", code, body)
	}
	if code, _ := fetch(t, adminURL+"/v1/functions", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/functions without the token: %d, want 401", code)
	}
	code, body = fetch(t, adminURL+"/v1/functions", "tok")
	if code != http.StatusOK || !strings.Contains(body, `"name":"hi"`) {
		t.Errorf("/v1/functions: %d %s", code, body)
	}
	stopAndWait(t, "activator", cmd, exited, syscall.SIGTERM, 15*time.Second)
}

// TestActivatorRolloutRefusesNothing: on SIGTERM `sless activator` turns
// unready and takes new connections for --propagation-delay before it
// drains, so the clients its Service still sends it until the endpoints
// change are served, not refused (it closed its listener at once); and it
// watches on meanwhile, so a Function created then is served, not unknown
// (its watch stopped at the signal).
func TestActivatorRolloutRefusesNothing(t *testing.T) {
	cfg := controlplane.Start(t)
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + writeKubeconfig(t, cfg)}, "activator",
		"--listen", "127.0.0.1:"+strconv.Itoa(serving), "--admin", "127.0.0.1:"+strconv.Itoa(admin),
		"--propagation-delay", "8s", "--drain", "5s")
	readyz := "http://127.0.0.1:" + strconv.Itoa(admin) + "/readyz"
	waitStatus(t, readyz, http.StatusOK)

	// New connections all along, as a Service's clients open them; an
	// unknown function is answered at once.
	url := "http://127.0.0.1:" + strconv.Itoa(serving) + "/fn/default/nobody"
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var served, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(url)
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
				served.Add(1)
			}
		})
	}
	eventually.TrueWithin(t, 10*time.Second, "load on the activator", func() bool { return served.Load() > 50 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, readyz, http.StatusServiceUnavailable)
	before := served.Load()
	eventually.TrueWithin(t, 10*time.Second, "load served while unready", func() bool { return served.Load() > before+50 })
	late := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeNode, Image: "x", TimeoutSeconds: 1}}
	if err := controlplane.Client(t, cfg).Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	// Known, it waits for an instance until its timeout: 504.
	eventually.TrueWithin(t, 5*time.Second, "a Function created while unready served", func() bool {
		code, _ := fetch(t, "http://127.0.0.1:"+strconv.Itoa(serving)+"/fn/default/late", "")
		return code == http.StatusGatewayTimeout
	})
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed to connect or were cut during the rollout, want none", n)
	}
	waitExit(t, "activator", exited, 20*time.Second)
}

// TestActivatorAdminSecret starts two `sless activator` processes at once
// on a cluster without the admin token's Secret: they end with one Secret,
// generated, whose token both require (401 without it, 200 with it); a
// token written into the Secret replaces it in both, without a restart.
func TestActivatorAdminSecret(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + writeKubeconfig(t, cfg), "POD_NAMESPACE=sless-system", "SLESS_ADMIN_TOKEN="}
	type activatorProcess struct {
		cmd    *exec.Cmd
		exited <-chan error
		admin  string
	}
	var activators []activatorProcess
	for range 2 {
		serving, admin := testfn.FreePort(t), testfn.FreePort(t)
		cmd, exited := startSless(t, nil, env, "activator", "--listen", "127.0.0.1:"+strconv.Itoa(serving),
			"--admin", "127.0.0.1:"+strconv.Itoa(admin), "--drain", "5s", "--propagation-delay", "0s")
		activators = append(activators, activatorProcess{cmd, exited, "http://127.0.0.1:" + strconv.Itoa(admin)})
	}
	for _, a := range activators {
		waitStatus(t, a.admin+"/readyz", http.StatusOK)
	}

	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace("sless-system")); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || secrets.Items[0].Name != "sless-admin" || len(secrets.Items[0].Data["token"]) < 32 {
		t.Fatalf("Secrets in sless-system after two starts: %d, want one sless-admin with a generated token", len(secrets.Items))
	}
	generated := string(secrets.Items[0].Data["token"])
	for i, a := range activators {
		if code, body := fetch(t, a.admin+"/v1/functions", ""); code != http.StatusUnauthorized {
			t.Errorf("activator %d: /v1/functions without the token: %d %s, want 401", i, code, body)
		}
		if code, _ := fetch(t, a.admin+"/v1/functions", "not-"+generated); code != http.StatusUnauthorized {
			t.Errorf("activator %d: /v1/functions with a wrong token: %d, want 401", i, code)
		}
		if code, body := fetch(t, a.admin+"/v1/functions", generated); code != http.StatusOK {
			t.Errorf("activator %d: /v1/functions with the generated token: %d %s, want 200", i, code, body)
		}
	}

	// A rotation, as `kubectl apply` of a new token would make it.
	secret := &secrets.Items[0]
	secret.Data["token"] = []byte("rotated-token")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	for i, a := range activators {
		eventually.True(t, fmt.Sprintf("activator %d to take the rotated token", i), func() bool {
			code, _ := fetch(t, a.admin+"/v1/functions", "rotated-token")
			return code == http.StatusOK
		})
		if code, _ := fetch(t, a.admin+"/v1/functions", generated); code != http.StatusUnauthorized {
			t.Errorf("activator %d: the token before the rotation: %d, want 401", i, code)
		}
	}
	for i, a := range activators {
		stopAndWait(t, fmt.Sprintf("activator %d", i), a.cmd, a.exited, syscall.SIGTERM, 15*time.Second)
	}
}

// TestActivatorAdminRefusedWithoutSecret runs `sless activator` as a
// ServiceAccount whose role lets it serve and read the admin token's
// Secret but not create it, on a cluster without the Secret: it serves
// invocations and its health, but refuses the admin API with a 503 that
// names the Secret to create, whatever token is sent; once someone creates
// the Secret, its token is taken without a restart.
func TestActivatorAdminRefusedWithoutSecret(t *testing.T) {
	cfg := controlplane.Start(t)
	c := controlplane.Client(t, cfg)
	ctx := context.Background()
	const account = "system:serviceaccount:sless-system:limited"
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: account}}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "limited"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"sless.dev"}, Resources: []string{"functions"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "limited"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "limited"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "limited", Namespace: "sless-system"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"sless-admin"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "limited", Namespace: "sless-system"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "limited"}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + writeKubeconfigAs(t, cfg, account), "POD_NAMESPACE=sless-system",
		"SLESS_ADMIN_TOKEN="}, "activator", "--listen", "127.0.0.1:"+strconv.Itoa(serving),
		"--admin", "127.0.0.1:"+strconv.Itoa(admin), "--drain", "5s", "--propagation-delay", "0s")
	adminURL := "http://127.0.0.1:" + strconv.Itoa(admin)
	waitStatus(t, adminURL+"/readyz", http.StatusOK)

	for _, token := range []string{"", "guess"} {
		code, body := fetch(t, adminURL+"/v1/functions", token)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "the Secret sless-system/sless-admin could not be read or created") ||
			!strings.Contains(body, `under the key \"token\"`) {
			t.Errorf("/v1/functions with token %q and no Secret: %d %s, want 503 naming the Secret to create", token, code, body)
		}
	}
	if code, body := fetch(t, adminURL+"/", ""); code != http.StatusServiceUnavailable {
		t.Errorf("the console with no Secret: %d %s, want 503", code, body)
	}
	if code, _ := fetch(t, adminURL+"/metrics", ""); code != http.StatusOK {
		t.Errorf("/metrics with no Secret: %d, want 200", code)
	}
	if code, _ := fetch(t, "http://127.0.0.1:"+strconv.Itoa(serving)+"/fn/default/nobody", ""); code != http.StatusNotFound {
		t.Errorf("an invocation with no Secret: %d, want 404 (served: an unknown function)", code)
	}

	// What the 503 asks for: an administrator creates the Secret.
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-admin", Namespace: "sless-system"},
		StringData: map[string]string{"token": "made-by-hand"}}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the created Secret's token to be taken", func() bool {
		code, _ := fetch(t, adminURL+"/v1/functions", "made-by-hand")
		return code == http.StatusOK
	})
	if code, _ := fetch(t, adminURL+"/v1/functions", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/functions without the token once the Secret exists: %d, want 401", code)
	}
	stopAndWait(t, "activator", cmd, exited, syscall.SIGTERM, 15*time.Second)
}

// writeKubeconfigAs writes a kubeconfig for cfg that impersonates user,
// as a ServiceAccount's in-cluster configuration would be that user.
func writeKubeconfigAs(t *testing.T, cfg *rest.Config, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"test": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"test": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
			Token: cfg.BearerToken, Impersonate: user}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "test"}},
		CurrentContext: "test",
	}, path)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func fetch(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// --trusted-proxies takes networks and single addresses; anything else is
// refused, naming it, before the activator starts.
func TestActivatorTrustedProxies(t *testing.T) {
	got, err := parsePrefixes([]string{"10.0.0.0/8", "192.168.1.7", "fd00::1/8"})
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00::/8")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parsePrefixes = %v, %v; want %v", got, err, want)
	}
	out, err := run("activator", "--trusted-proxies", "10.0.0.0/8,10.0.0.0/33", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), `--trusted-proxies: "10.0.0.0/33" is neither a network`) {
		t.Errorf("sless activator --trusted-proxies 10.0.0.0/33 = %v (%q), want the value refused", err, out)
	}
}
