package activator

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sless.dev/sless/internal/forward"
)

// ServeHTTP2 is the handler of the requests that came over HTTP/2 (h2c,
// gRPC): routed, throttled, buffered from zero and recorded as ServeHTTP's
// are, and carried to the instance's queue-proxy in h2c.
func (a *Activator) ServeHTTP2(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rt, rest, ok := a.routes.match([]byte(r.RequestURI), []byte(r.Host), a.cfg.Domain)
	if !ok || rt == nil || !rt.fn.HTTP {
		msg := UnknownFunction
		if rt != nil && rt.fn.DisabledHTTP != "" {
			msg = "trigger " + rt.fn.DisabledHTTP + " of " + rt.fn.Namespace + "/" + rt.fn.Name + " is disabled (enabled: false)"
		}
		failHTTP2(w, r, rt, http.StatusNotFound, msg)
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
	prefix := ""
	if strings.HasPrefix(r.RequestURI, "/fn/") {
		prefix = rt.prefix // routed by path, not by host
	}
	if rest != nil {
		u, err := url.ParseRequestURI(string(rest))
		if err != nil {
			res.code, res.err = failHTTP2(w, r, rt, http.StatusBadRequest, "malformed request"), "malformed request"
			return res, forward.Outcome{}
		}
		r.URL.Path, r.URL.RawPath, r.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	}
	forward.StripReservedHTTP(r.Header)
	forward.SetForwardedHTTP(r.Header, prefix, len(a.cfg.TrustedProxies) > 0 && a.trusted(remoteIP(r.RemoteAddr)))
	if r.Header.Get("X-Request-Id") == "" {
		r.Header.Set("X-Request-Id", string(a.appendRequestID(nil)))
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
