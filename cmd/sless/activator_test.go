package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/testfn"
)

// TestActivatorCommand runs `sless activator` as a real process against a
// real API server: it serves a Function created there (a request for it
// waits for an instance and times out), lists it on the admin API, refuses
// the admin API without the token, and exits 0 on SIGTERM.
func TestActivatorCommand(t *testing.T) {
	cfg := controlplane.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"test": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "test"}},
		CurrentContext: "test",
	}, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c := controlplane.Client(t, cfg)
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "hi", Namespace: "default"},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimeNode, Image: "x", TimeoutSeconds: 1}}
	if err := c.Create(context.Background(), fn); err != nil {
		t.Fatal(err)
	}

	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + kubeconfig, "SLESS_ADMIN_TOKEN=tok"}, "activator",
		"--listen", "127.0.0.1:"+strconv.Itoa(serving), "--admin", "127.0.0.1:"+strconv.Itoa(admin), "--drain", "5s")

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
