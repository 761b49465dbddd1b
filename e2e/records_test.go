//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/internal/pgtest"
)

// useDatabase points the activators at dbURL (the Secret sless-database,
// read at start) and restarts them; when the test ends they go back to
// memory.
func useDatabase(t *testing.T, dbURL string) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sless-system", Name: "sless-database"},
		StringData: map[string]string{"url": dbURL}}
	if err := cluster.c.Create(ctx, secret); err != nil {
		t.Fatalf("the database Secret: %v", err)
	}
	restartActivators(t)
	t.Cleanup(func() {
		_ = cluster.c.Delete(ctx, secret)
		restartActivators(t)
	})
}

// restartActivators rolls the activators out again, as kubectl rollout
// restart does, and waits for the rollout.
func restartActivators(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := cluster.c.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-activator"}, &d); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339Nano)
	if err := cluster.c.Patch(ctx, &d, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the activators rolled out", func() bool {
		var now appsv1.Deployment
		err := cluster.c.Get(ctx, client.ObjectKeyFromObject(&d), &now)
		return err == nil && now.Status.ObservedGeneration >= now.Generation && now.Status.UpdatedReplicas == *now.Spec.Replicas &&
			now.Status.AvailableReplicas == *now.Spec.Replicas && now.Status.Replicas == *now.Spec.Replicas
	})
}

// The records of invocations reach PostgreSQL from the activators' pods;
// the admin API and the console answer through the activators' admin
// Service.
func TestRecordsAndAdmin(t *testing.T) {
	dbURL, _ := pgtest.DB(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	local := u.String()
	u.Host = "10.244.0.1:5432" // the machine's PostgreSQL, relayed onto the bridge
	useDatabase(t, u.String())

	ns := namespace(t, "e2e-records")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "rec", "go", "hello-go", "Handle", "  scale: {initial: 1}\n"))
	for range 5 {
		waitFor(t, "an answer", func() bool {
			code, _, err := invoke(ns, "rec", "?name=records")
			return err == nil && code == 200
		})
	}
	conn, err := pgx.Connect(context.Background(), local)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	waitFor(t, "5 records of rec in PostgreSQL", func() bool {
		err := conn.QueryRow(context.Background(),
			"select count(*) from sless_invocations where namespace = $1 and function = 'rec' and status = 200", ns).Scan(&n)
		return err == nil && n >= 5
	})

	token := adminToken(t)
	for _, path := range []string{"/v1/functions", "/v1/namespaces/" + ns + "/functions/rec/invocations", "/"} {
		req, _ := http.NewRequest(http.MethodGet, cluster.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (path != "/" && !strings.Contains(string(body), "rec")) {
			t.Errorf("GET %s through the admin Service: %s %.300s", path, resp.Status, body)
		}
	}
}

// adminGet decodes the answer to GET path on the admin Service, on a
// connection of its own, so that successive calls may reach either
// activator.
func adminGet(t *testing.T, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, cluster.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken(t))
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %.300s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// adminToken is the admin API's token, from the Secret the activators
// generated.
func adminToken(t *testing.T) string {
	t.Helper()
	var secret corev1.Secret
	if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: "sless-admin"}, &secret); err != nil {
		t.Fatalf("the admin Secret: %v", err)
	}
	return strings.TrimSpace(string(secret.Data["token"]))
}
