// Package forward carries HTTP requests from a fasthttp server to the next
// hop (a queue-proxy, or a function process) and back: the request rewrite
// every proxy owes (hop-by-hop headers, X-Forwarded-For), an HTTP/1.1
// client whose calls can be aborted and whose bodies stream both ways, and
// the watch that tells a request its client hung up.
package forward

import (
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// PrepareRequest turns the client's request into the one for the next hop,
// in place: no copy, no allocation.
func PrepareRequest(req *fasthttp.Request, remote net.Addr) {
	if !req.Header.IsHTTP11() {
		// A proxy sends its own version (RFC 9110 6.2); the client's
		// answer keeps the client's.
		req.Header.SetProtocol("HTTP/1.1")
	}
	StripHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	if tcp, ok := remote.(*net.TCPAddr); ok {
		appendForwardedFor(req, tcp.AddrPort().Addr())
	}
}

// PrepareResponse turns the next hop's response into the client's, in
// place: hop-by-hop headers go, and the next hop closing its connection is
// no reason to close the client's.
func PrepareResponse(resp *fasthttp.Response) {
	resp.Header.ResetConnectionClose()
	StripHopByHop(&resp.Header)
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
