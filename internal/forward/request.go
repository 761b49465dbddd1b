// Package forward carries HTTP requests from a fasthttp server to the next
// hop (a queue-proxy, or a function process) and back: the request rewrite
// every proxy owes (hop-by-hop headers, X-Forwarded-For), an HTTP/1.1
// client whose calls can be aborted and whose bodies stream both ways, and
// the watch that tells a request its client hung up.
package forward

import (
	"bytes"
	"net"
	"net/http"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// PrepareRequest turns the client's request into the one for the next hop,
// in place: no copy, no allocation. It returns what the request asks its
// connection to switch to: a WebSocket upgrade is kept for the next hop,
// which may answer 101 (Switches.Carry); any other, the caller refuses.
func PrepareRequest(req *fasthttp.Request, remote net.Addr) Upgrade {
	if !req.Header.IsHTTP11() {
		// A proxy sends its own version (RFC 9110 6.2); the client's
		// answer keeps the client's.
		req.Header.SetProtocol("HTTP/1.1")
	}
	up := NoUpgrade
	if hasHopByHop(&req.Header) {
		up = upgradeOf(&req.Header)
		stripHopByHop(&req.Header)
		if up == UpgradeWebSocket {
			setUpgrade(&req.Header)
		}
	}
	req.Header.ResetConnectionClose()
	if tcp, ok := remote.(*net.TCPAddr); ok {
		appendForwardedFor(req, tcp.AddrPort().Addr())
	}
	return up
}

// The fields that tell a function where its caller's request came in, as
// the first hop saw it. X-Forwarded-Prefix is the path prefix the request
// was routed by, so that a relative redirect or a link keeps it. The host
// is the request's Host, which passes every hop unchanged, and the scheme
// is http, the activator's: a client's X-Forwarded-Host and
// X-Forwarded-Proto go, lest a framework that trusts proxies take them for
// the truth (adding the same values would only cost every request more
// bytes), unless the client is a proxy the platform was told to trust.
const (
	ForwardedPrefixHeader = "X-Forwarded-Prefix"
	ForwardedHostHeader   = "X-Forwarded-Host"
	ForwardedProtoHeader  = "X-Forwarded-Proto"
)

// SetForwarded removes a client's forwarding fields and sets
// X-Forwarded-Prefix to the path prefix the request was routed by (none
// when empty). A trusted proxy's X-Forwarded-Host and X-Forwarded-Proto
// stay: the host and scheme its own callers used, such as the https of an
// ingress that ended TLS.
func SetForwarded(h *fasthttp.RequestHeader, prefix string, trusted bool) {
	if hasForwarded(h) { // rare: each Del is a pass over the fields
		if !trusted {
			h.Del(ForwardedHostHeader)
			h.Del(ForwardedProtoHeader)
		}
		h.Del(ForwardedPrefixHeader)
	}
	if prefix != "" {
		h.Add(ForwardedPrefixHeader, prefix)
	}
}

// SetForwardedHTTP is SetForwarded for a net/http request's header (one
// that came over HTTP/2).
func SetForwardedHTTP(h http.Header, prefix string, trusted bool) {
	if !trusted {
		h.Del(ForwardedHostHeader)
		h.Del(ForwardedProtoHeader)
	}
	h.Del(ForwardedPrefixHeader)
	if prefix != "" {
		h.Set(ForwardedPrefixHeader, prefix)
	}
}

// hasForwarded reports whether a client sent one of the fields
// SetForwarded sets: a request read from a client is scanned in its raw
// head, once, as hasHopByHop does.
func hasForwarded(h *fasthttp.RequestHeader) bool {
	raw := h.RawHeaders()
	if len(raw) == 0 {
		return h.Peek(ForwardedHostHeader) != nil || h.Peek(ForwardedProtoHeader) != nil || h.Peek(ForwardedPrefixHeader) != nil
	}
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte("\n"))
		// Most fields are not even the length of X-Forwarded-Host.
		if len(line) > len(ForwardedHostHeader) && bytes.EqualFold(line[:len("X-Forwarded-")], []byte("X-Forwarded-")) {
			if name, _, ok := bytes.Cut(line, []byte(":")); ok {
				name = bytes.TrimSpace(name)
				if bytes.EqualFold(name, []byte(ForwardedHostHeader)) || bytes.EqualFold(name, []byte(ForwardedProtoHeader)) ||
					bytes.EqualFold(name, []byte(ForwardedPrefixHeader)) {
					return true
				}
			}
		}
		raw = rest
	}
	return false
}

// PrepareResponse turns the next hop's response into the client's, in
// place: hop-by-hop headers go, and the next hop closing its connection is
// no reason to close the client's. A 101 keeps the protocol it switches
// to (only a request that asked gets one).
func PrepareResponse(resp *fasthttp.Response) {
	resp.Header.ResetConnectionClose()
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		StripHopByHop(&resp.Header)
		return
	}
	protocol := string(resp.Header.Peek("Upgrade"))
	StripHopByHop(&resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", protocol)
}

// appendForwardedFor adds the client's address to X-Forwarded-For.
func appendForwardedFor(req *fasthttp.Request, ip netip.Addr) {
	var buf [256]byte
	b := buf[:0]
	if prior := req.Header.Peek("X-Forwarded-For"); len(prior) > 0 {
		if len(prior) > len(buf)-64 {
			b = make([]byte, 0, len(prior)+64)
		}
		b = append(append(b, prior...), ", "...)
	}
	b = ip.Unmap().AppendTo(b)
	req.Header.SetBytesV("X-Forwarded-For", b)
}
