package testfn

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// DialWebSocket opens a WebSocket to url (ws://…) with a client that
// never retries, and fails the test if the handshake does not end in 101.
func DialWebSocket(t testing.TB, url string) (*websocket.Conn, *http.Response) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	conn, resp, err := d.Dial(url, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", url, err, status)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, resp
}

// CheckEcho sends messages of several sizes over a connection to /ws, up
// to past a relay's buffer, text and binary, and checks each comes back
// whole.
func CheckEcho(t testing.TB, conn *websocket.Conn) {
	t.Helper()
	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	for i, msg := range [][]byte{[]byte("hello"), big, {0, 1, 2, 255}} {
		kind := websocket.TextMessage
		if i == 2 {
			kind = websocket.BinaryMessage
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := conn.WriteMessage(kind, msg); err != nil {
			t.Fatalf("write message %d: %v", i, err)
		}
		gotKind, got, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read echo %d: %v", i, err)
		}
		if gotKind != kind || !bytes.Equal(got, msg) {
			t.Fatalf("echo %d: kind %d, %d bytes; want kind %d, %d bytes", i, gotKind, len(got), kind, len(msg))
		}
	}
}

// CloseWebSocket asks the echo server to close, and checks its close
// frame (1000, "bye") arrives.
func CloseWebSocket(t testing.TB, conn *websocket.Conn) {
	t.Helper()
	if err := conn.WriteMessage(websocket.TextMessage, []byte("close")); err != nil {
		t.Fatalf("write close: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _, err := conn.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after asking to close: %v, want the server's close frame 1000", err)
	}
}

// CloseHandshake closes a WebSocket as a client does (a close frame 1000)
// and checks the server answers with its own close frame 1000, as RFC
// 6455 asks of any server.
func CloseHandshake(t testing.TB, conn *websocket.Conn) {
	t.Helper()
	if err := conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done")); err != nil {
		t.Fatalf("write close: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after a close: %v, want the server's close frame 1000", err)
	}
}
