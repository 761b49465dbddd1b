package activator

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/runs"
)

// ServeHTTP2 is the handler of the requests that came over HTTP/2 (h2c,
// gRPC): routed, throttled, buffered from zero and recorded as ServeHTTP's
// are, and carried to the instance's queue-proxy in h2c.
func (a *Activator) ServeHTTP2(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rt, rest, ok := a.routes.match([]byte(r.RequestURI), []byte(r.Host), a.cfg.Domain)
	if !ok && strings.HasPrefix(r.RequestURI, runs.Path) {
		a.serveRunsHTTP2(w, r)
		return
	}
	if !ok || rt == nil || !rt.fn.HTTP {
		msg := UnknownFunction
		if rt != nil && rt.fn.DisabledHTTP != "" {
			msg = "trigger " + rt.fn.DisabledHTTP + " of " + rt.fn.Namespace + "/" + rt.fn.Name + " is disabled (enabled: false)"
		}
		failHTTP2(w, r, rt, http.StatusNotFound, msg)
		return
	}
	if wantsAsyncHTTP2(r.Header) {
		a.submitHTTP2(w, r, rt, rest)
		return
	}
	res, out := a.serveHTTP2(w, r, rt, rest, start)
	bytesOut, err := strconv.Atoi(w.Header().Get("Content-Length"))
	if err != nil {
		bytesOut = -1
	}
	a.record(rt, start, res, max(int(r.ContentLength), -1), bytesOut, r.Header.Get("X-Request-Id"))
	forward.AbortCut(out)
}

// serveHTTP2 prepares the request for the instance as ServeHTTP does, and
// sends it to one, and to another when one refuses it untouched.
func (a *Activator) serveHTTP2(w http.ResponseWriter, r *http.Request, rt *route, rest []byte, start time.Time) (result, forward.Outcome) {
	var res result
	if r.ContentLength > a.cfg.MaxBodyBytes {
		res.code, res.err = failHTTP2(w, r, rt, http.StatusRequestEntityTooLarge, forward.ErrBodyTooLarge.Error()), forward.ErrBodyTooLarge.Error()
		return res, forward.Outcome{}
	}
	if !a.prepareHTTP2(r, rt, rest) {
		res.code, res.err = failHTTP2(w, r, rt, http.StatusBadRequest, "malformed request"), "malformed request"
		return res, forward.Outcome{}
	}
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)
	deadline := start.Add(rt.fn.Timeout)
	for attempt := 1; ; attempt++ {
		lease, cold, wait, err := a.acquire(rt, deadline, r.Context().Done())
		res.wait += wait
		res.cold = res.cold || cold
		if err != nil {
			code, msg := noSlot(rt, err)
			if code != forward.StatusClientClosedRequest {
				failHTTP2(w, r, rt, code, msg)
			}
			res.code, res.err = code, msg
			return res, forward.Outcome{}
		}
		res.instance = lease.Addr()
		out := a.h2.Serve(w, r, lease.Addr(), forward.Limits{Start: deadline, End: start.Add(max(rt.fn.MaxDuration, rt.fn.Timeout)), Idle: rt.fn.IdleTimeout})
		f := out.Failed
		if f == nil {
			lease.Release()
			res.code, res.err = out.Code, out.Err
			return res, out
		}
		if f.Unsent {
			lease.Refused()
		} else {
			lease.Release()
		}
		if f.Unsent && out.Resendable && attempt < a.cfg.MaxAttempts && time.Now().Before(deadline) {
			continue // nothing reached that instance: another may take it
		}
		res.code = f.Code
		if f.Code != forward.StatusClientClosedRequest {
			res.err = f.Message()
			failHTTP2(w, r, rt, f.Code, res.err)
		}
		return res, out
	}
}

// prepareHTTP2 makes r the request its function gets, as ServeHTTP
// does: its path under the function's route (rest, when routed by path),
// the platform's header fields set and a client's copies of them
// dropped; false when rest is malformed.
func (a *Activator) prepareHTTP2(r *http.Request, rt *route, rest []byte) bool {
	prefix := ""
	if strings.HasPrefix(r.RequestURI, "/fn/") {
		prefix = rt.prefix // routed by path, not by host
	}
	if rest != nil {
		u, err := url.ParseRequestURI(string(rest))
		if err != nil {
			return false
		}
		r.URL.Path, r.URL.RawPath, r.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	}
	forward.StripReservedHTTP(r.Header)
	forward.SetForwardedHTTP(r.Header, prefix, len(a.cfg.TrustedProxies) > 0 && a.trusted(remoteIP(r.RemoteAddr)))
	if r.Header.Get("X-Request-Id") == "" {
		r.Header.Set("X-Request-Id", string(a.appendRequestID(nil)))
	}
	return true
}

// submitHTTP2 is submit for a request that came over HTTP/2. Its run is
// attempted over HTTP/1.1, as any run is: a run is a whole request and
// a whole answer, which either carries.
func (a *Activator) submitHTTP2(w http.ResponseWriter, r *http.Request, rt *route, rest []byte) {
	if a.runs == nil {
		answerHTTP2(w, r, rt, failure(http.StatusNotImplemented, noRunsTaken))
		return
	}
	if r.Method == http.MethodConnect {
		answerHTTP2(w, r, rt, failure(http.StatusBadRequest, noSwitch))
		return
	}
	if r.ContentLength > a.runs.cfg.MaxBodyBytes {
		answerHTTP2(w, r, rt, a.runs.tooLarge())
		return
	}
	if !a.prepareHTTP2(r, rt, rest) {
		answerHTTP2(w, r, rt, failure(http.StatusBadRequest, "malformed request"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.runs.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		answerHTTP2(w, r, rt, a.runs.tooLarge())
		return
	case err != nil:
		answerHTTP2(w, r, rt, failure(http.StatusBadRequest, "the request's body could not be read: "+err.Error()))
		return
	}
	r.Header.Del("Prefer")
	req, text := runRequestOfHTTP2(r, body)
	answerHTTP2(w, r, rt, a.takeRun(r.Context(), rt, r.Header.Get(runs.IdempotencyKeyHeader), req, text))
}

// runRequestOfHTTP2 is runRequestOf for a request that came over HTTP/2:
// its authority is the run's Host.
func runRequestOfHTTP2(r *http.Request, body []byte) (runs.Request, bool) {
	req := runs.Request{Method: r.Method, Path: r.URL.RequestURI(), Body: body, Header: [][2]string{{"Host", r.Host}}}
	ok := utf8.ValidString(req.Path) && utf8.ValidString(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header = append(req.Header, [2]string{k, v})
			ok = ok && utf8.ValidString(k) && utf8.ValidString(v)
		}
	}
	return req, ok
}

// failHTTP2 is fail for a request that came over HTTP/2.
func failHTTP2(w http.ResponseWriter, r *http.Request, rt *route, code int, msg string) int {
	forward.WriteHTTPError(w, code, errorBody(rt, msg, r.URL.Path))
	return code
}

// remoteIP is the address of a net/http request's client, or nil.
func remoteIP(remoteAddr string) net.IP {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return nil
	}
	return net.ParseIP(host)
}
