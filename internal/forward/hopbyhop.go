package forward

import (
	"bytes"
	"iter"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/wire"
)

// hopByHop are the headers that describe one connection and must not be
// forwarded (RFC 9110 7.6.1), with those a Connection field names.
// fasthttp itself owns Transfer-Encoding, and Connection: close, which it
// keeps as a flag; Connection's other values it keeps as a field, which
// goes here.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Upgrade",
}

// unlistable are the fields a Connection field may not remove: the ones
// that frame and route the message, which a client naming them would
// otherwise strip from the next hop's request.
var unlistable = []string{"Host", "Content-Length", "Transfer-Encoding", "Close", "Keep-Alive"}

// ownFields are the headers fasthttp keeps outside its field list; they
// are single-valued and never reordered, so a rebuild leaves them alone.
var ownFields = []string{
	"Host", "Content-Type", "Content-Length", "Content-Encoding", "User-Agent", "Cookie",
	"Set-Cookie", "Server", "Date", "Connection", "Transfer-Encoding",
}

// headers is what fasthttp's request and response headers share.
type headers interface {
	Peek(key string) []byte
	PeekAll(key string) [][]byte
	Del(key string)
	All() iter.Seq2[[]byte, []byte]
	AddBytesKV(key, value []byte)
}

// StripHopByHop removes the hop-by-hop headers from h, and the fields its
// Connection field names, keeping the order of repeated fields
// (removeFields). Requests and responses without hop-by-hop headers, the
// usual case, cost a few lookups and no allocation; one whose Connection
// names no field, one allocation at most.
func StripHopByHop(h headers) {
	if hasHopByHop(h) {
		stripHopByHop(h)
	}
}

// stripHopByHop removes the hop-by-hop headers of a head that has some.
func stripHopByHop(h headers) {
	names := hopByHop
	if listed := connectionListed(h); len(listed) > 0 {
		names = append(listed, hopByHop...)
	}
	removeFields(h, names)
}

// connectionListed are the fields h's Connection fields name, but for
// connection options (close, keep-alive) and the fields that frame and
// route the message; nil when there are none.
func connectionListed(h headers) []string {
	var listed []string
	for _, v := range h.PeekAll("Connection") {
		for len(v) > 0 {
			var name []byte
			name, v, _ = bytes.Cut(v, []byte(","))
			if name = bytes.TrimSpace(name); len(name) > 0 && !isOneOf(name, unlistable) && !isOneOf(name, hopByHop) {
				listed = append(listed, string(name))
			}
		}
	}
	return listed
}

// StripReserved removes from a client's request every header whose name
// starts with wire.HeaderPrefix: only the platform sets those, and a
// handler believes them. A request without any, the usual case, costs one
// pass over its head and no allocation.
func StripReserved(h *fasthttp.RequestHeader) {
	var names []string
	if raw := h.RawHeaders(); len(raw) > 0 {
		// The raw head, for the reason hasHopByHop gives.
		for len(raw) > 0 {
			line, rest, _ := bytes.Cut(raw, []byte("\n"))
			if name, _, ok := bytes.Cut(line, []byte(":")); ok && isReserved(bytes.TrimSpace(name)) {
				names = append(names, string(bytes.TrimSpace(name)))
			}
			raw = rest
		}
	} else {
		for k := range h.All() {
			if isReserved(k) {
				names = append(names, string(k))
			}
		}
	}
	if len(names) > 0 {
		removeFields(h, names)
	}
}

// StripReservedHTTP is StripReserved for a net/http request's header (one
// that came over HTTP/2).
func StripReservedHTTP(h http.Header) {
	for name := range h {
		if len(name) >= len(wire.HeaderPrefix) && strings.EqualFold(name[:len(wire.HeaderPrefix)], wire.HeaderPrefix) {
			delete(h, name)
		}
	}
}

func isReserved(name []byte) bool {
	return len(name) >= len(wire.HeaderPrefix) && strings.EqualFold(string(name[:len(wire.HeaderPrefix)]), wire.HeaderPrefix)
}

// removeFields removes the fields named names from h. fasthttp's Del
// moves the last field into the deleted one's place, which would reorder
// the values of a repeated field; when a field repeats, the fields are
// rebuilt in order instead.
func removeFields(h headers, names []string) {
	if !hasRepeatedField(h) {
		for _, k := range names {
			h.Del(k)
		}
		return
	}
	type field struct{ key, value []byte }
	var kept []field
	for k, v := range h.All() {
		if !isOneOf(k, names) && !isOneOf(k, ownFields) {
			kept = append(kept, field{bytes.Clone(k), bytes.Clone(v)})
		}
	}
	for _, k := range names {
		h.Del(k)
	}
	for _, f := range kept {
		h.Del(string(f.key))
	}
	for _, f := range kept {
		h.AddBytesKV(f.key, f.value)
	}
}

// hasHopByHop reports whether h holds a hop-by-hop header in one pass
// over its fields, comparing lengths first, where a Peek per name would
// scan them seven times. A request read from a client is scanned in its
// raw head: iterating its fields would parse its cookies, and fasthttp
// would then send them re-serialized. h is one of fasthttp's two header
// types; the concrete types let the compiler inline the iterator, so the
// pass allocates nothing.
func hasHopByHop(h headers) bool {
	switch h := h.(type) {
	case *fasthttp.RequestHeader:
		if raw := h.RawHeaders(); len(raw) > 0 {
			return rawHasHopByHop(raw)
		}
		for _, k := range hopByHop {
			if h.Peek(k) != nil {
				return true
			}
		}
	case *fasthttp.ResponseHeader:
		for k := range h.All() {
			if isHopByHop(k) {
				return true
			}
		}
	}
	return false
}

// rawHasHopByHop scans a raw request head, one field a line.
func rawHasHopByHop(raw []byte) bool {
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte("\n"))
		if name, _, ok := bytes.Cut(line, []byte(":")); ok && isHopByHop(bytes.TrimSpace(name)) {
			return true
		}
		raw = rest
	}
	return false
}

func isHopByHop(key []byte) bool {
	switch len(key) {
	case len("Te"), len("Trailer"), len("Keep-Alive") /* and Connection */, len("Proxy-Connection"),
		len("Proxy-Authenticate"), len("Proxy-Authorization"):
		return isOneOf(key, hopByHop)
	}
	return false
}

// hasRepeatedField reports whether a field name appears twice in h; a
// request read from a client is looked at in its raw head, for the reason
// hasHopByHop gives.
func hasRepeatedField(h headers) bool {
	if req, ok := h.(*fasthttp.RequestHeader); ok && len(req.RawHeaders()) > 0 {
		return rawHasRepeatedField(req.RawHeaders())
	}
	i := 0
	for k := range h.All() {
		j := 0
		for k2 := range h.All() {
			if j >= i {
				break
			}
			if bytes.EqualFold(k, k2) {
				return true
			}
			j++
		}
		i++
	}
	return false
}

func rawHasRepeatedField(raw []byte) bool {
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte("\n"))
		if name, _, ok := bytes.Cut(line, []byte(":")); ok {
			name = bytes.TrimSpace(name)
			for later := rest; len(later) > 0; {
				l, r, _ := bytes.Cut(later, []byte("\n"))
				if n, _, ok := bytes.Cut(l, []byte(":")); ok && bytes.EqualFold(name, bytes.TrimSpace(n)) {
					return true
				}
				later = r
			}
		}
		raw = rest
	}
	return false
}

func isOneOf(key []byte, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}
