package adminauth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, token, method, auth, cookie, contentType string
		want                                           Verdict
	}{
		{name: "no token configured", method: "POST", want: Allowed},
		{name: "bearer", token: "s3", method: "POST", auth: "Bearer s3", want: Allowed},
		{name: "wrong bearer", token: "s3", method: "GET", auth: "Bearer s4", want: Missing},
		{name: "nothing", token: "s3", method: "GET", want: Missing},
		{name: "cookie read", token: "s3", method: "GET", cookie: "s3", want: Allowed},
		{name: "wrong cookie", token: "s3", method: "GET", cookie: "s", want: Missing},
		{name: "cookie change with JSON", token: "s3", method: "PATCH", cookie: "s3", contentType: "application/json; charset=utf-8", want: Allowed},
		{name: "cookie change from a form", token: "s3", method: "POST", cookie: "s3", contentType: "application/x-www-form-urlencoded", want: Forged},
		{name: "cookie change with no body type", token: "s3", method: "POST", cookie: "s3", want: Forged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/v1/functions", strings.NewReader("{}"))
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.cookie != "" {
				r.AddCookie(&http.Cookie{Name: Cookie, Value: tc.cookie})
			}
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			if got := Check(r, tc.token); got != tc.want {
				t.Errorf("Check = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLogin(t *testing.T) {
	r := httptest.NewRequest("POST", "/login", nil)
	w := httptest.NewRecorder()
	if Login(w, r, "s3", "wrong") || len(w.Result().Cookies()) != 0 {
		t.Fatal("a wrong token logged in")
	}
	if Login(w, r, "", "") {
		t.Fatal("logged in with no token configured")
	}
	w = httptest.NewRecorder()
	if !Login(w, r, "s3", "s3") {
		t.Fatal("the token did not log in")
	}
	cs := w.Result().Cookies()
	if len(cs) != 1 || cs[0].Name != Cookie || cs[0].Value != "s3" || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || !cs[0].Expires.IsZero() {
		t.Fatalf("cookie %+v: want a session cookie, HttpOnly, SameSite=Strict", cs)
	}
	w = httptest.NewRecorder()
	Logout(w)
	if cs := w.Result().Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Fatalf("logout cookie %+v: want it cleared", cs)
	}
}

// TestGuard: a Guard refuses until it has a token, never opens for an
// empty one, and its state decides a request as Check does.
func TestGuard(t *testing.T) {
	var g Guard
	r := httptest.NewRequest("GET", "/v1/functions", nil)
	r.Header.Set("Authorization", "Bearer s3")
	if st := g.Load(); st.Refused == "" || st.Check(r) != Refused {
		t.Errorf("a new Guard: %+v, verdict %v: want refused until its token is set", st, st.Check(r))
	}
	g.Set("s3")
	if v := g.Load().Check(r); v != Allowed {
		t.Errorf("the token set: %v, want Allowed", v)
	}
	g.Set("s4")
	if v := g.Load().Check(r); v != Missing {
		t.Errorf("the token rotated: the old one is %v, want Missing", v)
	}
	g.Set("")
	if st := g.Load(); st.Check(r) != Refused || st.Refused != "the admin token is empty" {
		t.Errorf("an empty token: %+v, want refused, never open", st)
	}
	g.Refuse("create the Secret x/y")
	if st := g.Load(); st.Check(r) != Refused || st.Refused != "create the Secret x/y" || st.Token != "" {
		t.Errorf("refused: %+v", st)
	}
	// A hand-made State without a token is open, as `sless dev` without
	// one is.
	if v := (State{}).Check(httptest.NewRequest("POST", "/v1/x", nil)); v != Allowed {
		t.Errorf("State{} = %v, want Allowed", v)
	}
}

// TestGuardSwapsUnderLoad: readers see one whole state or the other while
// the token rotates (run with -race).
func TestGuardSwapsUnderLoad(t *testing.T) {
	var g Guard
	g.Set("a")
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if st := g.Load(); st.Token != "a" && st.Token != "b" {
					t.Errorf("a reader saw %+v", st)
					return
				}
			}
		})
	}
	for i := range 1000 {
		g.Set([]string{"a", "b"}[i%2])
	}
	close(done)
	wg.Wait()
}
