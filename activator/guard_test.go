package activator

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/console"
	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
)

// TestServerGuard runs the admin port behind a Guard, as on Kubernetes:
// refused, every admin route answers 503 with the reason (never open) but
// the health routes, /metrics and the queue-proxies' records; with a
// token, it is required by the API and the console; rotated, the old one
// is refused and the new one taken, at once.
func TestServerGuard(t *testing.T) {
	reg := prometheus.NewRegistry()
	ring := invocation.NewRing(10)
	a, err := New(Config{}, &countingPoker{}, ring, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFunction(RouteSpec{Namespace: "ns", Name: "hello", HTTP: true, Timeout: 10 * time.Second})
	guard := &adminauth.Guard{}
	const reason = "the admin API is refused: create the Secret sless-system/sless-admin"
	guard.Refuse(reason)
	srv := &Server{Activator: a, DrainTimeout: time.Second, Log: quiet, Admin: AdminServer{
		Activator: a, Registry: reg, Records: ring, Guard: guard, AcceptRecords: true,
		Console:    console.Handler{}, // open, and not served: with a Guard, ConsoleFor is the console
		ConsoleFor: func(token string) http.Handler { return console.Handler{Token: token} },
		Log:        quiet,
	}}
	serving, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, serving, admin) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + admin.Addr().String()
	eventually.True(t, "the admin port", func() bool { code, _ := get(t, base+"/healthz"); return code == 200 })

	do := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		resp, b := callWith(t, noRedirects, method, base+path, body, header...)
		return resp.StatusCode, string(b)
	}
	bearer := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
	fire := wire.FirePath("ns", "hello", "tick")

	// Refused: nothing admin is open, whatever the request carries.
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/functions"}, {"GET", "/v1/namespaces/ns/functions/hello/invocations"},
		{"POST", fire}, {"GET", "/"}, {"GET", "/ui/"}, {"POST", "/login"},
	} {
		code, body := do(r.method, r.path, "token=x", bearer("x")...)
		var answer map[string]string
		if code != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &answer) != nil || answer["error"] != reason {
			t.Errorf("refused: %s %s = %d %s, want 503 with the reason as JSON", r.method, r.path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := do("GET", path, ""); code != http.StatusOK {
			t.Errorf("refused: %s = %d, want 200", path, code)
		}
	}
	// The records intake is vouched for by address, not the token: served.
	if code, body := do("POST", wire.RecordsPath, "[]"); code != http.StatusNoContent {
		t.Errorf("refused: %s = %d %s, want 204", wire.RecordsPath, code, body)
	}

	guard.Set("one")
	if code, _ := do("GET", "/v1/functions", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, body := do("GET", "/v1/functions", "", bearer("one")...); code != http.StatusOK || !strings.Contains(body, `"name":"hello"`) {
		t.Errorf("the token: %d %s", code, body)
	}
	if code, _ := do("GET", "/ui/", ""); code != http.StatusUnauthorized {
		t.Errorf("the console without a session: %d, want 401 (its login form)", code)
	}
	code, _ := do("POST", "/login", url.Values{"token": {"one"}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	if code != http.StatusSeeOther {
		t.Errorf("console login with the token: %d, want 303", code)
	}
	if code, _ := do("GET", "/ui/", "", "Cookie", adminauth.Cookie+"=one"); code != http.StatusOK {
		t.Errorf("the console with the session: %d, want 200", code)
	}

	guard.Set("two")
	if code, _ := do("GET", "/v1/functions", "", bearer("one")...); code != http.StatusUnauthorized {
		t.Errorf("the old token after a rotation: %d, want 401", code)
	}
	if code, _ := do("GET", "/ui/", "", "Cookie", adminauth.Cookie+"=one"); code != http.StatusUnauthorized {
		t.Errorf("the console with the old session: %d, want 401", code)
	}
	if code, _ := do("GET", "/v1/functions", "", bearer("two")...); code != http.StatusOK {
		t.Errorf("the new token: %d, want 200", code)
	}
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
