package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/testfn"
)

// TestActivatorCommand runs `sless activator` as a real process against a
// real API server: it serves a Function created there (a request for it
// waits for an instance and times out), lists it on the admin API, refuses
// the admin API without the token, and exits 0 on SIGTERM.
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
// change are served, not refused. (It closed its listener at once.)
func TestActivatorRolloutRefusesNothing(t *testing.T) {
	cfg := controlplane.Start(t)
	serving, admin := testfn.FreePort(t), testfn.FreePort(t)
	cmd, exited := startSless(t, nil, []string{"KUBECONFIG=" + writeKubeconfig(t, cfg)}, "activator",
		"--listen", "127.0.0.1:"+strconv.Itoa(serving), "--admin", "127.0.0.1:"+strconv.Itoa(admin),
		"--propagation-delay", "5s", "--drain", "5s")
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
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed to connect or were cut during the rollout, want none", n)
	}
	waitExit(t, "activator", exited, 20*time.Second)
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
