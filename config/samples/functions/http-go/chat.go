package web

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
)

// chat serves /chat, a WebSocket that sends each message back: the
// handshake and frames of RFC 6455 by hand, on the connection
// http.ResponseController hands over, so that the sample needs nothing
// but the standard library. A function would rather use a WebSocket
// library, which takes the connection the same way.
func chat(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "/chat is a WebSocket (Upgrade: websocket)"})
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
	if rw.Flush() != nil {
		return
	}
	var msgOp byte
	var msg []byte // a message sent in several frames, until its last
	for {
		fin, op, payload, err := readFrame(rw.Reader)
		if err != nil {
			return
		}
		switch op {
		case 0x8: // close: answered with the same code, then the end
			writeFrame(rw.Writer, 0x8, payload)
			rw.Flush()
			return
		case 0x9: // ping
			writeFrame(rw.Writer, 0xA, payload)
		case 0xA: // pong
		case 0x0: // the next frame of a message
			msg = append(msg, payload...)
		default: // a message's first frame
			msgOp, msg = op, payload
		}
		if len(msg) > maxMessage {
			return
		}
		if op < 0x8 && fin {
			writeFrame(rw.Writer, msgOp, msg)
			msg = nil
		}
		if rw.Flush() != nil {
			return
		}
	}
}

// maxMessage bounds a message: a larger one ends the connection.
const maxMessage = 1 << 20

// readFrame reads one masked frame from a client: whether it is the last
// of its message, its opcode and its payload.
func readFrame(r *bufio.Reader) (fin bool, op byte, payload []byte, err error) {
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return false, 0, nil, err
	}
	if head[1]&0x80 == 0 {
		return false, 0, nil, errors.New("unmasked frame")
	}
	n := uint64(head[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		_, err = io.ReadFull(r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, err = io.ReadFull(r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	if err != nil || n > maxMessage {
		return false, 0, nil, errors.New("message too large")
	}
	var mask [4]byte
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, mask[:]); err != nil {
		return false, 0, nil, err
	}
	if _, err := io.ReadFull(r, payload); err != nil {
		return false, 0, nil, err
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return head[0]&0x80 != 0, head[0] & 0x0F, payload, nil
}

// writeFrame writes one unmasked frame, as a server does.
func writeFrame(w *bufio.Writer, op byte, payload []byte) {
	w.WriteByte(0x80 | op)
	switch n := len(payload); {
	case n < 126:
		w.WriteByte(byte(n))
	case n <= 0xFFFF:
		w.WriteByte(126)
		w.Write(binary.BigEndian.AppendUint16(nil, uint16(n)))
	default:
		w.WriteByte(127)
		w.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
	}
	w.Write(payload)
}
