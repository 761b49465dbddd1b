// Package console serves the web console on the admin port: static pages
// embedded in the binary, which read and act through the same JSON admin
// API a script uses. It owns only the pages and the login that puts the
// admin token in a session cookie; the API checks that cookie itself
// (internal/adminauth).
package console

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"sless.dev/sless/internal/adminauth"
)

// assets are the pages, scripts and styles. vendor/ holds uPlot, copied
// from npm by `make console`; without it the charts say how to get it.
//
//go:embed assets
var assets embed.FS

var login = template.Must(template.ParseFS(assets, "assets/login.html"))

// Handler serves the console: / and /ui/ the app, POST /login and POST
// /logout the session. Token, when set, is the admin token the login form
// asks for.
type Handler struct {
	Token string
}

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/login" && r.Method == http.MethodPost:
		h.login(w, r)
	case r.URL.Path == "/logout" && r.Method == http.MethodPost:
		adminauth.Logout(w)
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	case r.URL.Path == "/" || r.URL.Path == "/ui":
		http.Redirect(w, r, "/ui/", http.StatusFound)
	case r.URL.Path == "/ui/" || r.URL.Path == "/ui/index.html":
		h.index(w, r)
	case strings.HasPrefix(r.URL.Path, "/ui/"):
		serveAsset(w, r, strings.TrimPrefix(r.URL.Path, "/ui/"))
	default:
		http.NotFound(w, r)
	}
}

// index serves the app, or the login form to a browser without the token.
func (h Handler) index(w http.ResponseWriter, r *http.Request) {
	if adminauth.Check(r, h.Token) != adminauth.Allowed {
		showLogin(w, http.StatusUnauthorized, "")
		return
	}
	serveAsset(w, r, "index.html")
}

func (h Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if h.Token == "" {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther) // nothing to log in to
		return
	}
	if !adminauth.Login(w, r, h.Token, r.PostFormValue("token")) {
		showLogin(w, http.StatusUnauthorized, "That token is not the admin token.")
		return
	}
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func showLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = login.Execute(w, struct{ Error string }{msg})
}

// serveAsset serves one embedded file; pages are never cached, so an
// upgrade shows at the next load.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	sub, _ := fs.Sub(assets, "assets")
	if name == "login.html" {
		http.NotFound(w, r) // a template, served by showLogin
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
	http.ServeFileFS(w, r, sub, name)
}
