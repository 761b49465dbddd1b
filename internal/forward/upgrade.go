package forward

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Upgrade is what a request asks its connection to switch to (its Upgrade
// field, named by its Connection field), as the hops treat it.
type Upgrade uint8

const (
	// NoUpgrade is a plain request, or one whose Upgrade the hops ignore
	// and serve as HTTP/1.1 (h2c: RFC 9113 drops that upgrade, and a
	// client asking for it takes an HTTP/1.1 answer).
	NoUpgrade Upgrade = iota
	// UpgradeWebSocket passes every hop: when the function answers 101,
	// the connection carries its bytes both ways (Switches.Carry).
	UpgradeWebSocket
	// UpgradeUnsupported is any other protocol: the first hop refuses it
	// (StatusUpgradeUnsupported) rather than answer as if it had not
	// been asked.
	UpgradeUnsupported
)

// StatusUpgradeUnsupported answers an Upgrade the hops do not carry.
const StatusUpgradeUnsupported = fasthttp.StatusNotImplemented

// UpgradeRefusal is the error of a request refused for the protocol it
// asked to switch to (UpgradeUnsupported).
func UpgradeRefusal(h *fasthttp.RequestHeader) string {
	return fmt.Sprintf("cannot switch to %q: the platform carries WebSocket upgrades (Upgrade: websocket) only", h.Peek("Upgrade"))
}

// upgradeOf reads what a request's head asks to switch to. Only a head
// with a hop-by-hop field can ask (PrepareRequest checks).
func upgradeOf(h *fasthttp.RequestHeader) Upgrade {
	if !hasToken(h.PeekAll("Connection"), "upgrade") {
		return NoUpgrade
	}
	protocols := h.PeekAll("Upgrade")
	switch {
	case len(protocols) == 0:
		return NoUpgrade
	case hasToken(protocols, "websocket"):
		return UpgradeWebSocket
	case onlyToken(protocols, "h2c"):
		return NoUpgrade
	}
	return UpgradeUnsupported
}

// tokens yields the tokens of comma-separated field values, trimmed.
func tokens(values [][]byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for _, v := range values {
			for len(v) > 0 {
				var t []byte
				t, v, _ = bytes.Cut(v, []byte(","))
				if !yield(bytes.TrimSpace(t)) {
					return
				}
			}
		}
	}
}

// onlyToken reports whether every token of values is token.
func onlyToken(values [][]byte, token string) bool {
	for t := range tokens(values) {
		if !bytes.EqualFold(t, []byte(token)) {
			return false
		}
	}
	return true
}

// hasToken reports whether values hold token (case-insensitive; a
// protocol's version, websocket/13, counts).
func hasToken(values [][]byte, token string) bool {
	for t := range tokens(values) {
		if name, _, _ := bytes.Cut(t, []byte("/")); bytes.EqualFold(name, []byte(token)) {
			return true
		}
	}
	return false
}

// setUpgrade puts back the fields of a WebSocket upgrade that stripping
// the hop-by-hop headers removed: the next hop is asked the same.
func setUpgrade(h *fasthttp.RequestHeader) {
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
}

// asksUpgrade reports whether a request prepared for the next hop asks to
// switch protocols: only such a request may be answered 101.
func asksUpgrade(req *fasthttp.Request) bool {
	return len(req.Header.Peek("Upgrade")) > 0
}

// errUnaskedSwitch is the failure of a next hop that answered 101 to a
// request that did not ask to switch protocols.
var errUnaskedSwitch = errors.New("switched protocols unasked (101 to a request without Upgrade)")

// tunnel carries a switched connection's bytes both ways: between the
// client's connection, to which the 101 head has been written, and the
// next hop's (b, the 101 answer's body). It returns when either side ends
// its direction, or stop closes (the hop's drain has run out); both
// connections are closed then, as net/http/httputil's ReverseProxy does:
// a WebSocket ends when either side closes, after its close frame, which
// has passed by then. Memory is bounded: a buffer each way.
//
// It runs in the request's handler, so that whatever the request holds (a
// slot of the function's concurrency, a place in the drain) is held until
// the connection ends and released in the same scope that took it.
func tunnel(client net.Conn, b *Body, stop <-chan struct{}) error {
	_ = client.SetDeadline(time.Time{}) // a tunnel is bound by its ends, not the request's timeouts
	_ = b.c.conn.SetDeadline(time.Time{})
	up := make(chan error, 1)
	go func() { up <- relay(b.c.conn, client) }()
	down := make(chan error, 1)
	go func() { down <- relay(client, b.c.br) }()
	var err error
	running := 2
	select {
	case err = <-up:
		running, up = 1, nil
	case err = <-down:
		running, down = 1, nil
	case <-stop:
		err = errTunnelStopped
	}
	// Both directions stop now: the client's connection is closed by
	// its server once the handler returns, the next hop's by b.Close.
	_ = client.SetDeadline(longAgo)
	_ = b.c.conn.SetDeadline(longAgo)
	for ; running > 0; running-- {
		select {
		case <-up:
		case <-down:
		}
	}
	b.finished = true // not for reuse: Close closes it
	b.reusable = false
	return err
}

// errTunnelStopped ends a tunnel cut by its hop's drain.
var errTunnelStopped = errors.New("connection closed by the platform's drain")

var tunnelBuffers = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// relay copies src to dst until src ends; its error is nil at src's end.
// It copies through the pooled buffer: the connections' own fast paths
// (TCPConn's ReadFrom and WriteTo, bufio's WriteTo) would each allocate a
// 32 KiB buffer of their own for a socket that splice cannot serve.
func relay(dst io.Writer, src io.Reader) error {
	buf := tunnelBuffers.Get().(*[]byte)
	defer tunnelBuffers.Put(buf)
	_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
	return err
}

// Switched reports whether b is the connection of a 101 answer, to carry
// with Switches.Carry rather than as a body.
func (b *Body) Switched() bool { return b.switched }

// Switches carries a hop's switched connections (WebSockets), and closes
// those still open when the hop's drain runs out.
type Switches struct {
	stop chan struct{}
	once sync.Once
}

// NewSwitches returns a hop's Switches.
func NewSwitches() *Switches { return &Switches{stop: make(chan struct{})} }

// CloseAll closes the switched connections still open, and those switched
// from now on: cleanly, each side's connection closed.
func (s *Switches) CloseAll() { s.once.Do(func() { close(s.stop) }) }

// Carry answers a request with the 101 of its next hop, whose connection
// b is, and carries the switched connection until either side ends it or
// CloseAll. The head is written here, not by fasthttp, which writes an
// answer only after the handler returns; fasthttp then writes nothing
// more and closes the client's connection.
func (s *Switches) Carry(ctx *fasthttp.RequestCtx, b *Body) error {
	defer ctx.Hijack(func(net.Conn) {})
	defer ctx.HijackSetNoResponse(true)
	defer b.Close()
	client := ctx.Conn()
	// The deadlines left by the connection's earlier requests (fasthttp's
	// write timeout after an answer) have passed on a connection kept
	// alive long enough.
	_ = client.SetDeadline(time.Time{})
	if _, err := client.Write(ctx.Response.Header.Header()); err != nil {
		return fmt.Errorf("write the switch to the client: %w", err)
	}
	return tunnel(client, b, s.stop)
}
