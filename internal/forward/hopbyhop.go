package forward

import (
	"bytes"
	"iter"
	"strings"
)

// hopByHop are the headers that describe one connection and must not be
// forwarded (RFC 9110 7.6.1). fasthttp itself owns Connection and
// Transfer-Encoding; the rest are removed here.
var hopByHop = []string{
	"Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Upgrade",
}

// ownFields are the headers fasthttp keeps outside its field list; they
// are single-valued and never reordered, so a rebuild leaves them alone.
var ownFields = []string{
	"Host", "Content-Type", "Content-Length", "Content-Encoding", "User-Agent", "Cookie",
	"Set-Cookie", "Server", "Date", "Connection", "Transfer-Encoding",
}

// headers is what fasthttp's request and response headers share.
type headers interface {
	Peek(key string) []byte
	Del(key string)
	All() iter.Seq2[[]byte, []byte]
	AddBytesKV(key, value []byte)
}

// StripHopByHop removes the hop-by-hop headers from h. fasthttp's Del
// moves the last field into the deleted one's place, which would reorder
// the values of a repeated field; when a field repeats, the fields are
// rebuilt in order instead. Requests and responses without hop-by-hop
// headers, the usual case, cost a few lookups and no allocation.
func StripHopByHop(h headers) {
	present := false
	for _, k := range hopByHop {
		if h.Peek(k) != nil {
			present = true
			break
		}
	}
	if !present {
		return
	}
	if !hasRepeatedField(h) {
		for _, k := range hopByHop {
			h.Del(k)
		}
		return
	}
	type field struct{ key, value []byte }
	var kept []field
	for k, v := range h.All() {
		if !isOneOf(k, hopByHop) && !isOneOf(k, ownFields) {
			kept = append(kept, field{bytes.Clone(k), bytes.Clone(v)})
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	for _, f := range kept {
		h.Del(string(f.key))
	}
	for _, f := range kept {
		h.AddBytesKV(f.key, f.value)
	}
}

func hasRepeatedField(h headers) bool {
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

func isOneOf(key []byte, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}
