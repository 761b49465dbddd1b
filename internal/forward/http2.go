package forward

import (
	"bytes"
	"encoding/binary"
	"time"
)

// http2Preface starts the connection preface of an HTTP/2 client that
// knows the server speaks it (RFC 9113 3.4): h2c with prior knowledge, a
// gRPC client's.
var http2Preface = []byte("PRI * HTTP/2.0\r\n")

// http2Refusal is what a hop without an HTTP/2 server answers an HTTP/2
// client, in HTTP/2: its own preface (an empty SETTINGS frame) and a
// GOAWAY with HTTP_1_1_REQUIRED, which clients report (Go's: "server sent
// GOAWAY and closed the connection; LastStreamID=0,
// ErrCode=HTTP_1_1_REQUIRED, debug=..."), where an HTTP/1.1 400 would be
// garbage to them and a silent close a mystery. http2Busy is what a hop
// whose HTTP/2 server has no room answers: ENHANCE_YOUR_CALM.
var (
	http2Refusal = goAway(0xd, "sless: this port serves HTTP/1.1 only")
	http2Busy    = goAway(0xb, "sless: no room for another HTTP/2 connection (too many, or draining)")
)

// goAway returns an empty SETTINGS frame and a GOAWAY with code and
// debug, processing no stream.
func goAway(code uint32, debug string) []byte {
	b := []byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0} // SETTINGS, empty, stream 0
	n := 8 + len(debug)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), 0x7, 0, 0, 0, 0, 0) // GOAWAY, stream 0
	b = binary.BigEndian.AppendUint32(b, 0)                             // last stream id
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, debug...)
}

// isHTTP2Preface reports whether the first bytes read from a client are
// an HTTP/2 preface's.
func isHTTP2Preface(first []byte) bool {
	return bytes.HasPrefix(first, http2Preface)
}

// refuseHTTP2 answers an HTTP/2 client with http2Refusal, or http2Busy,
// within a second: the connection then ends (its close lingers for what
// the client still sends, so that the answer is read, not reset).
func (c *Conn) refuseHTTP2(busy bool) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	answer := http2Refusal
	if busy {
		answer = http2Busy
	}
	_, _ = c.Conn.Write(answer)
}
