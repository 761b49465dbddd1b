//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/browsertest"
	"sless.dev/sless/internal/pgtest"
	"sless.dev/sless/invocation"
	"sless.dev/sless/runs"
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

// activatorsOnDatabase gives the activators a database of the test's own
// on the machine's PostgreSQL (useDatabase), and returns its URL from this
// machine.
func activatorsOnDatabase(t *testing.T) string {
	t.Helper()
	dbURL, _ := pgtest.DB(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	local := u.String()
	u.Host = nodeIP + ":5432" // the machine's PostgreSQL, relayed onto the bridge
	useDatabase(t, u.String())
	return local
}

// restartActivators rolls the activators out again, as kubectl rollout
// restart does, and waits for the rollout, and for the old pods to be
// gone: each serves on for its propagation delay after it is told to stop,
// with its old settings, so a request of the test could reach it.
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
	waitFor(t, "the old activators gone", func() bool {
		pods := activatorPods(t)
		return len(pods) == int(*d.Spec.Replicas) && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	})
}

// The records of invocations reach PostgreSQL from the activators' pods;
// a FunctionRun applied with kubectl runs through them; the admin API and
// the console answer through the activators' admin Service.
func TestRecordsAndAdmin(t *testing.T) {
	local := activatorsOnDatabase(t)
	ns := namespace(t, "e2e-records")
	sless(t, "deploy", "-n", ns, "-f", manifest(t, "rec", "go", "hello-go", "Handle", "  scale: {initial: 1}\n"))
	if a := mustInvokeKnown(t, ns, "rec", "?name=records"); a.code != 200 {
		t.Fatalf("rec: %d %s", a.code, a.body)
	}
	for range 4 {
		if a, err := invoke(ns, "rec", "?name=records"); err != nil || a.code != 200 {
			t.Fatalf("rec: %d %s %v", a.code, a.body, err)
		}
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

	testFunctionRun(t, ns)

	token := adminToken(t)
	for _, path := range []string{"/v1/functions", "/v1/namespaces/" + ns + "/functions/rec/invocations"} {
		req, _ := http.NewRequest(http.MethodGet, cluster.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "rec") {
			t.Errorf("GET %s through the admin Service: %s %.300s", path, resp.Status, body)
		}
	}

	// The console, in a browser, through the same Service: logged in with
	// the token, its list shows the function.
	ctx := browsertest.New(t, 2*time.Minute)
	row := `#functions tbody tr[data-function="` + ns + `/rec"]`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(cluster.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("the console's list with %s/rec: %v", ns, err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+" .state")))
	if err != nil {
		t.Fatal(err)
	}
	if state == "" {
		t.Errorf("the console shows %s/rec without a state", ns)
	}
}

// testFunctionRun runs rec once through kubectl: a FunctionRun applied,
// waited on for its Complete condition, its answer in its status, its run
// listed by the admin API.
func testFunctionRun(t *testing.T, ns string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "run.yaml")
	yaml := "apiVersion: sless.dev/v1alpha1\nkind: FunctionRun\nmetadata: {name: greet}\nspec: {function: rec, method: GET, path: \"/?name=by-kubectl\"}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "-n", ns, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply of a FunctionRun: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "-n", ns, "wait", "--for=condition=Complete", "functionrun/greet", "--timeout=3m"); err != nil {
		out2, _ := kubectl(t, "-n", ns, "get", "functionrun/greet", "-o", "yaml")
		t.Fatalf("kubectl wait for the FunctionRun: %v\n%s\n%s", err, out, out2)
	}
	out, err := kubectl(t, "-n", ns, "get", "functionrun/greet", "-o", "json")
	var fr v1alpha1.FunctionRun
	if err != nil || json.Unmarshal([]byte(out), &fr) != nil {
		t.Fatalf("kubectl get functionrun: %v\n%s", err, out)
	}
	st := fr.Status
	if st.Phase != v1alpha1.FunctionRunSucceeded || st.Attempts != 1 || st.Result == nil || st.Result.Status != 200 ||
		!strings.Contains(st.Result.Body, "hello by-kubectl") || len(fr.Finalizers) != 0 {
		t.Errorf("the FunctionRun's status: %+v (finalizers %v)", st, fr.Finalizers)
	}
	if out, err := kubectl(t, "-n", ns, "get", "functionruns"); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "),
		"NAME FUNCTION PHASE ATTEMPTS AGE greet rec Succeeded 1") {
		t.Errorf("kubectl get functionruns: %v\n%s", err, out)
	}
	var list struct{ Runs []runs.Run }
	adminGet(t, "/v1/namespaces/"+ns+"/functions/rec/runs", &list)
	if len(list.Runs) != 1 || string(list.Runs[0].ID) != st.RunID || list.Runs[0].State != runs.Succeeded {
		t.Errorf("the admin API's runs of rec: %+v, want the FunctionRun's, %s, succeeded", list.Runs, st.RunID)
	}
}

// adminGet decodes the answer to GET path on the admin Service, on a
// connection of its own, so that successive calls may reach either
// activator.
func adminGet(t *testing.T, path string, out any) {
	t.Helper()
	if err := tryAdminGet(adminToken(t), path, out); err != nil {
		t.Fatal(err)
	}
}

// tryAdminGet is adminGet with the admin token given, returning what went
// wrong: for a test polling while an activator may be away.
func tryAdminGet(token, path string, out any) error {
	req, _ := http.NewRequest(http.MethodGet, cluster.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s %.300s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("GET %s: %v", path, err)
	}
	return nil
}

// records reads a function's invocations, those query selects, from every
// activator (each keeps the records of what passed through it), oldest
// first.
func records(t *testing.T, ns, name, query string) []invocation.Record {
	t.Helper()
	token := adminToken(t)
	var all []invocation.Record
	for _, p := range activatorPods(t) {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.Status.PodIP+":9090/v1/namespaces/"+ns+"/functions/"+name+"/invocations?limit=100&"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct{ Invocations []invocation.Record }
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("invocations from %s: %s %v", p.Name, resp.Status, err)
		}
		all = append(all, page.Invocations...)
	}
	slices.SortFunc(all, func(a, b invocation.Record) int { return a.Start.Compare(b.Start) })
	return all
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
