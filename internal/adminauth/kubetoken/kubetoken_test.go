package kubetoken_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/adminauth/kubetoken"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

const ns = "sless-system"

// syncBuffer is a log a test reads while the watch writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start runs a Secret for sless-system/sless-admin against cfg until the
// test ends; its guard and its log.
func start(t *testing.T, cfg *rest.Config, generate bool) (*adminauth.Guard, *kubetoken.Secret, *syncBuffer) {
	t.Helper()
	guard, logs := &adminauth.Guard{}, &syncBuffer{}
	s, err := kubetoken.New(cfg, ns, kubetoken.DefaultName, guard, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.Generate = generate
	s.RetryBackoff = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return guard, s, logs
}

// synced waits for s's watch to have listed the Secret.
func synced(t *testing.T, s *kubetoken.Secret) {
	t.Helper()
	select {
	case <-s.Synced():
	case <-time.After(eventually.Within):
		t.Fatal("the Secret's watch did not sync")
	}
}

func controlPlane(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	cfg := controlplane.Start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cfg, kube
}

func secretToken(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), kubetoken.DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data[kubetoken.Key])
}

func setToken(t *testing.T, kube kubernetes.Interface, token string) {
	t.Helper()
	ctx := context.Background()
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{kubetoken.Key: []byte(token)}
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// holds waits for the guard to require token.
func holds(t *testing.T, guard *adminauth.Guard, token, what string) {
	t.Helper()
	eventually.True(t, what, func() bool { st := guard.Load(); return st.Refused == "" && st.Token == token })
}

// TestGenerateAndFollow: several activators starting at once without the
// Secret end with one Secret whose random token each guard holds; a
// rotation reaches every guard; a Secret without a token refuses; a
// deleted Secret is recreated with a new token; and no log carries a
// token.
func TestGenerateAndFollow(t *testing.T) {
	cfg, kube := controlPlane(t)
	const n = 4
	guards := make([]*adminauth.Guard, n)
	logs := make([]*syncBuffer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { guards[i], _, logs[i] = start(t, cfg, true) })
	}
	wg.Wait()

	list, err := kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("secrets after %d starts: %d, %v, want 1", n, len(list.Items), err)
	}
	first := secretToken(t, kube)
	if raw, err := base64.RawURLEncoding.DecodeString(first); err != nil || len(raw) != 32 {
		t.Errorf("generated token %d characters (%v): want 32 random bytes in URL-safe base64", len(first), err)
	}
	if l := list.Items[0].Labels; l["app.kubernetes.io/part-of"] != "sless" {
		t.Errorf("generated Secret's labels %v: want it marked part of sless", l)
	}
	for i, g := range guards {
		// Run returns with the guard set: no waiting for the watch.
		if st := g.Load(); st.Refused != "" || st.Token != first {
			t.Errorf("activator %d: guard %q refused %q, want the Secret's token", i, st.Token, st.Refused)
		}
	}

	// A rotation with kubectl (a file's newline included) reaches every
	// guard; the old token no longer does.
	setToken(t, kube, "rotated-1\n")
	for _, g := range guards {
		holds(t, g, "rotated-1", "the rotated token")
	}

	setToken(t, kube, "")
	for _, g := range guards {
		eventually.True(t, "a Secret without a token to refuse", func() bool {
			return strings.Contains(g.Load().Refused, "sless-system/sless-admin has nothing under the key \"token\"")
		})
	}

	// Deleted: one of them recreates it, with a new token, which all hold.
	if err := kube.CoreV1().Secrets(ns).Delete(context.Background(), kubetoken.DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var recreated string
	eventually.True(t, "the Secret recreated", func() bool {
		s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), kubetoken.DefaultName, metav1.GetOptions{})
		if err == nil {
			recreated = string(s.Data[kubetoken.Key])
		}
		return recreated != ""
	})
	if recreated == first {
		t.Error("the recreated Secret has the first token again")
	}
	for _, g := range guards {
		holds(t, g, recreated, "the recreated Secret's token")
	}
	for i, l := range logs {
		for _, token := range []string{first, "rotated-1", recreated} {
			if strings.Contains(l.String(), token) {
				t.Errorf("activator %d logged a token:\n%s", i, l)
			}
		}
	}
}

// TestExistingSecret: a Secret the user made is used as it is and never
// rewritten; a holder that does not generate (a client of the admin API)
// refuses when it is deleted, and holds it again when it is back.
func TestExistingSecret(t *testing.T) {
	cfg, kube := controlPlane(t)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubetoken.DefaultName, Namespace: ns},
		StringData: map[string]string{kubetoken.Key: "mine"}}
	secret, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	generating, gs, _ := start(t, cfg, true)
	reading, rs, _ := start(t, cfg, false)
	for _, g := range []*adminauth.Guard{generating, reading} {
		if st := g.Load(); st.Token != "mine" {
			t.Errorf("guard %+v, want the user's token", st)
		}
	}
	synced(t, gs)
	synced(t, rs)
	if got := secretToken(t, kube); got != "mine" {
		t.Errorf("the user's Secret was rewritten: token %d characters", len(got))
	}
	if err := kube.CoreV1().Secrets(ns).Delete(ctx, kubetoken.DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The generating holder recreates it; the reading one follows.
	var recreated string
	eventually.True(t, "the Secret recreated", func() bool {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{})
		if err == nil {
			recreated = string(s.Data[kubetoken.Key])
		}
		return recreated != ""
	})
	if s, _ := kube.CoreV1().Secrets(ns).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{}); s.UID == secret.UID {
		t.Fatal("the deleted Secret is still there")
	}
	holds(t, reading, recreated, "the reading guard to follow the recreated Secret")
	holds(t, generating, recreated, "the generating guard to hold its new token")
}

// TestNotGenerating: without Generate, a missing Secret refuses the admin
// API, naming the Secret, and its creation ends the refusal.
func TestNotGenerating(t *testing.T) {
	cfg, kube := controlPlane(t)
	guard, s, _ := start(t, cfg, false)
	if st := guard.Load(); st.Token != "" || !strings.Contains(st.Refused, "Secret sless-system/sless-admin does not exist") {
		t.Errorf("guard %+v, want a refusal naming the missing Secret", st)
	}
	synced(t, s)
	if _, err := kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: kubetoken.DefaultName}, StringData: map[string]string{kubetoken.Key: "late"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holds(t, guard, "late", "the created Secret's token")
}

// TestRoleRefusesCreate runs the Secret as a ServiceAccount whose Role
// lets it read and watch the Secret but not create it: the admin API is
// refused with a message naming the Secret to create, and the log says
// why; once the Role allows create, a retry creates it without a restart.
// Without any role, get is refused too, with the same answer.
func TestRoleRefusesCreate(t *testing.T) {
	cfg, kube := controlPlane(t)
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "token-reader", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{kubetoken.DefaultName}, Verbs: []string{"get", "list", "watch"}},
	}}
	role, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "token-reader", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: ns}}}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(account string) *rest.Config {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + account}
		return c
	}

	nobody, _, _ := start(t, as("nobody"), true)
	guard, _, logs := start(t, as("reader"), true)
	for who, g := range map[string]*adminauth.Guard{"without a role": nobody, "without create": guard} {
		st := g.Load()
		if st.Token != "" || !strings.Contains(st.Refused, "the Secret sless-system/sless-admin could not be read or created") ||
			!strings.Contains(st.Refused, `create it with the token under the key "token"`) {
			t.Errorf("%s: guard %+v, want a refusal naming the Secret to create", who, st)
		}
	}
	if !strings.Contains(logs.String(), "forbidden") {
		t.Errorf("the log does not say the role forbade it:\n%s", logs)
	}
	if _, err := kube.CoreV1().Secrets(ns).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Secret exists though no one could create it: %v", err)
	}

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}})
	if _, err := kube.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "a retry to create the Secret once the role allows it", func() bool {
		_, err := kube.CoreV1().Secrets(ns).Get(ctx, kubetoken.DefaultName, metav1.GetOptions{})
		return err == nil
	})
	holds(t, guard, secretToken(t, kube), "the created Secret's token")
	if st := nobody.Load(); st.Refused == "" {
		t.Errorf("an account that may not read the Secret holds a token: %+v", st)
	}
}

func TestNewRefusesNoName(t *testing.T) {
	if _, err := kubetoken.New(&rest.Config{Host: "https://127.0.0.1:1"}, ns, "", &adminauth.Guard{}, slog.Default()); err == nil ||
		!strings.Contains(err.Error(), "a namespace and a name are required") {
		t.Errorf("New without a name = %v, want a clear error", err)
	}
}
