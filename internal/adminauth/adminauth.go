// Package adminauth guards the admin port: a script sends the admin token
// as a bearer token, a browser once through the console's login form,
// which keeps it in a session cookie the page's scripts cannot read.
package adminauth

import (
	"crypto/subtle"
	"mime"
	"net/http"
)

// Cookie names the console's session cookie.
const Cookie = "sless_session"

// Verdict is what Check found.
type Verdict int

const (
	// Allowed: no token is configured, or the request carries it.
	Allowed Verdict = iota
	// Missing: the request carries no token, or a wrong one.
	Missing
	// Forged: the session cookie is good, but a request that changes
	// something did not come from the console's scripts (its body is not
	// JSON), so it may be another site's form riding on the cookie.
	Forged
)

// Check reports whether r may use the admin API guarded by token.
func Check(r *http.Request, token string) Verdict {
	if token == "" || equal(r.Header.Get("Authorization"), "Bearer "+token) {
		return Allowed
	}
	c, err := r.Cookie(Cookie)
	if err != nil || !equal(c.Value, token) {
		return Missing
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return Allowed
	}
	// A cross-site form can send only form or text bodies without a
	// preflight the admin port never answers.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return Forged
	}
	return Allowed
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// Login sets the session cookie when given is the token, and reports
// whether it was. The cookie lives as long as the browser session, is
// sent only to this host's pages (SameSite=Strict) and never to scripts.
func Login(w http.ResponseWriter, r *http.Request, token, given string) bool {
	if token == "" || !equal(given, token) {
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: Cookie, Value: token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return true
}

// Logout clears the session cookie.
func Logout(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: Cookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode})
}
