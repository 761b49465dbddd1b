// Package adminauth guards the admin port: a script sends the admin token
// as a bearer token, a browser once through the console's login form,
// which keeps it in a session cookie the page's scripts cannot read. A
// Guard holds a token that changes while the port serves (a Kubernetes
// Secret, rotated), or why there is none to require, in which case the
// guarded routes are refused rather than opened.
package adminauth

import (
	"crypto/subtle"
	"mime"
	"net/http"
	"sync/atomic"
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
	// Refused: no token can be had (State.Refused says why), so nobody
	// may use the admin API: an unguarded API would be open to every pod
	// that reaches the port.
	Refused
)

// Guard holds the token the admin port requires while it changes: the
// watch of its Secret swaps it in place, and every request reads it
// without a lock. The zero Guard refuses until Set, so that a port never
// serves open while its token is being fetched.
type Guard struct{ p atomic.Pointer[State] }

// State is what a Guard holds at one moment: a token, or why there is
// none.
type State struct {
	// Token is the token a request must carry.
	Token string
	// Refused, when set, is why the admin API is refused: no token can
	// be had. It names what to fix, never a token.
	Refused string
}

// notLoaded is a Guard's state before its first Set or Refuse.
var notLoaded = State{Refused: "the admin token is not loaded yet"}

// Set makes token the one requests must carry. An empty token refuses:
// a Guard never opens the API.
func (g *Guard) Set(token string) {
	if token == "" {
		g.Refuse("the admin token is empty")
		return
	}
	g.p.Store(&State{Token: token})
}

// Refuse refuses every guarded request, saying why.
func (g *Guard) Refuse(reason string) { g.p.Store(&State{Refused: reason}) }

// Load is the Guard's state now. A request reads it once and decides on
// that snapshot, so that a rotation in its middle cannot mix two states.
func (g *Guard) Load() State {
	if s := g.p.Load(); s != nil {
		return *s
	}
	return notLoaded
}

// Check reports whether r may use the admin API in state s: Refused when
// s is a refusal, else as Check with s's token (an empty one, which only
// a State made by hand can have, opens it, as for `sless dev` without a
// token).
func (s State) Check(r *http.Request) Verdict {
	if s.Refused != "" {
		return Refused
	}
	return Check(r, s.Token)
}

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
