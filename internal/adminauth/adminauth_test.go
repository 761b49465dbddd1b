package adminauth

import (
	"net/http"
	"net/http/httptest"
	"strings"
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
