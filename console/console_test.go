package console

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/internal/needs"

	"sless.dev/sless/internal/adminauth"
)

func serve(t *testing.T, h http.Handler, method, path, body, cookie string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: adminauth.Cookie, Value: cookie})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestHandler(t *testing.T) {
	h := Handler{Token: "s3"}
	for _, tc := range []struct {
		name, method, path, body, cookie string
		code                             int
		location, contains               string
	}{
		{name: "root", method: "GET", path: "/", code: 302, location: "/ui/"},
		{name: "index without a session: the form", method: "GET", path: "/ui/", code: 401, contains: `name="token"`},
		{name: "index with the session", method: "GET", path: "/ui/", cookie: "s3", code: 200, contains: "/ui/app.js"},
		{name: "a wrong session: the form", method: "GET", path: "/ui/", cookie: "s4", code: 401, contains: `name="token"`},
		{name: "wrong token", method: "POST", path: "/login", body: "token=nope", code: 401, contains: "not the admin token"},
		{name: "right token", method: "POST", path: "/login", body: "token=s3", code: 303, location: "/ui/"},
		{name: "logout", method: "POST", path: "/logout", code: 303, location: "/ui/"},
		{name: "script", method: "GET", path: "/ui/app.js", code: 200, contains: "function route()"},
		{name: "the login template is not a page", method: "GET", path: "/ui/login.html", code: 404},
		{name: "no such page", method: "GET", path: "/elsewhere", code: 404},
		{name: "no such asset", method: "GET", path: "/ui/nope.js", code: 404},
		{name: "a change of a page", method: "PUT", path: "/ui/", code: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(t, h, tc.method, tc.path, tc.body, tc.cookie)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || resp.Header.Get("Location") != tc.location || !bytes.Contains(body, []byte(tc.contains)) {
				t.Errorf("%d, Location %q, body %.200q: want %d, %q, with %q", resp.StatusCode, resp.Header.Get("Location"), body, tc.code, tc.location, tc.contains)
			}
		})
	}
	resp := serve(t, h, "POST", "/login", url.Values{"token": {"s3"}}.Encode(), "")
	if c := resp.Cookies(); len(c) != 1 || c[0].Value != "s3" || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("login cookie %+v", c)
	}
	if resp := serve(t, Handler{}, "GET", "/ui/", "", ""); resp.StatusCode != 200 {
		t.Errorf("no token configured: the index answers %d, want 200", resp.StatusCode)
	}
}

// The chart library is copied from npm by make console; CI runs the tests
// after it, so there it must be in place and the lockfile's version.
func TestVendored(t *testing.T) {
	for _, name := range []string{"uPlot.iife.min.js", "uPlot.min.css"} {
		embedded, err := assets.ReadFile("assets/vendor/" + name)
		if err != nil {
			needs.Missing(t, "%s, not embedded: make console copies it from npm", name)
		}
		installed, err := os.ReadFile(filepath.Join("web", "node_modules", "uplot", "dist", name))
		if err != nil {
			t.Fatalf("%s: %v (make console installs it)", name, err)
		}
		if !bytes.Equal(embedded, installed) {
			t.Errorf("the embedded %s is not the one package-lock.json pins: run make console", name)
		}
	}
}
