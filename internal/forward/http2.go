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

// http2Refusal is what a hop answers an HTTP/2 client, in HTTP/2, since
// it serves HTTP/1.1 only: its own preface (an empty SETTINGS frame) and a
// GOAWAY with HTTP_1_1_REQUIRED, which clients report (Go's: "server sent
// GOAWAY and closed the connection; LastStreamID=0,
// ErrCode=HTTP_1_1_REQUIRED, debug=..."), where an HTTP/1.1 400 would be
// garbage to them and a silent close a mystery.
var http2Refusal = func() []byte {
	debug := []byte("sless serves HTTP/1.1 only: HTTP/2 (h2c, gRPC) is not carried yet")
	b := []byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0} // SETTINGS, empty, stream 0
	n := 8 + len(debug)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), 0x7, 0, 0, 0, 0, 0) // GOAWAY, stream 0
	b = binary.BigEndian.AppendUint32(b, 0)                             // last stream id
	b = binary.BigEndian.AppendUint32(b, 0xd)                           // HTTP_1_1_REQUIRED
	return append(b, debug...)
}()

// isHTTP2Preface reports whether the first bytes read from a client are
// an HTTP/2 preface's.
func isHTTP2Preface(first []byte) bool {
	return bytes.HasPrefix(first, http2Preface)
}

// refuseHTTP2 answers an HTTP/2 client with http2Refusal, within a second:
// the connection then ends (its Close lingers for what the client still
// sends, so that the answer is read, not reset).
func (c *Conn) refuseHTTP2() {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Conn.Write(http2Refusal)
}
