package forward

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The limits of a client's request head, which the activator enforces
// with a 431 in the platform's JSON, whatever runtime the function runs
// in. The hops behind it take more, for the fields the platform adds
// (X-Forwarded-For, X-Request-Id, a trigger's Sless-…): the queue-proxy
// heads up to InnerHeadBytes, each runtime more fields and bytes than
// that, so that none refuses in its own way a head the activator let
// through (Python's http.server stops at 100 fields, Node at 16 KiB).
const (
	MaxHeadBytes    = 16 << 10
	MaxHeaderFields = 100
	InnerHeadBytes  = 2 * MaxHeadBytes
)

// ErrTooManyFields is the answer to a request head of more than
// MaxHeaderFields fields (431).
var ErrTooManyFields = fmt.Errorf("request header has more than %d fields", MaxHeaderFields)

// TooManyFields reports whether a request read from a client has more than
// MaxHeaderFields header fields: its raw head, one field a line and a
// blank line after them, is counted without parsing it.
func TooManyFields(h *fasthttp.RequestHeader) bool {
	return bytes.Count(h.RawHeaders(), []byte("\n"))-1 > MaxHeaderFields
}

// NewServer returns a fasthttp server set up for a proxy hop: request
// bodies streamed and bounded by maxBody (one declared over it refused
// from the request's head, before any of it is read or a 100 Continue
// invites it), heads up to MaxHeadBytes (a hop behind the activator
// raises ReadBufferSize to InnerHeadBytes), a client
// given readTimeout (0: DefaultReadTimeout) to send a request head and
// to take an answer written at once, and nothing added to the answers
// that the next hop did not send (no default Server, Content-Type or Date
// headers). Serve it on a Hangups Listener with the same readTimeout, and
// bound its connections with MaxConns.
func NewServer(handler fasthttp.RequestHandler, onReadError func(*fasthttp.RequestCtx, error), maxBody int64, readTimeout time.Duration, log *slog.Logger) *fasthttp.Server {
	if readTimeout <= 0 {
		readTimeout = DefaultReadTimeout
	}
	return &fasthttp.Server{
		Handler:                      handler,
		HeaderReceived:               refuseEarly(maxBody),
		ExpectHandler:                expect(handler, maxBody),
		ErrorHandler:                 onReadError,
		ReadBufferSize:               MaxHeadBytes, // the longest request head
		MaxRequestBodySize:           int(maxBody),
		StreamRequestBody:            true,
		ReadTimeout:                  readTimeout,
		WriteTimeout:                 readTimeout,
		IdleTimeout:                  90 * time.Second,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		NoDefaultDate:                true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		Logger:                       &slogPrinter{log: log},
	}
}

// refuseEarly puts a request whose head declares a body over maxBody on
// the path of Expect: 100-continue, whatever the client asked: there
// expect answers it from its head alone. fasthttp would otherwise read
// the first 8 KiB of the body before the handler runs, so that a client
// that sends its head and waits would get no answer but a 408.
func refuseEarly(maxBody int64) func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		if int64(h.ContentLength()) > maxBody {
			h.Set(fasthttp.HeaderExpect, "100-continue")
		}
		return fasthttp.RequestConfig{}
	}
}

// expect answers Expect: 100-continue: 100 lets the client send its body,
// but one declared over maxBody gets the hop's handler's answer at once
// (413, in the hop's JSON, counted as the client's) before any of it is
// sent, and the connection closes. The handler answers such a request
// from its head, reading nothing.
func expect(handler fasthttp.RequestHandler, maxBody int64) func(*fasthttp.RequestCtx) int {
	return func(ctx *fasthttp.RequestCtx) int {
		if int64(ctx.Request.Header.ContentLength()) <= maxBody {
			return fasthttp.StatusContinue
		}
		handler(ctx)
		return ctx.Response.StatusCode()
	}
}

// StreamUntil lets a streamed answer be written until the request's
// deadline, and the client's read timeout after it to take the last
// bytes: the server's WriteTimeout is for answers written at once.
func StreamUntil(ctx *fasthttp.RequestCtx, deadline time.Time) {
	grace := DefaultReadTimeout
	if cc, ok := ctx.Conn().(*Conn); ok {
		grace = cc.readTimeout
	}
	_ = ctx.SetWriteDeadline(deadline.Add(grace))
}

// reservedFDs are the file descriptors MaxConns keeps for everything but
// client connections: listeners, the runtime's, logs, probes.
const reservedFDs = 64

// MaxConns is how many client connections a hop can serve at once within
// the process's file descriptor limit, when each connection may need
// fdsPerConn descriptors (its own, and one to the next hop; more when the
// next hops live in the same process). A server that takes more runs out
// of descriptors for the next hop; past MaxConns, fasthttp answers a new
// connection 503 and closes it, and the connections it serves go on.
func MaxConns(fdsPerConn int) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 1 << 20
	}
	return max(int(lim.Cur)-reservedFDs, 16) / max(fdsPerConn, 1)
}

// slogPrinter routes fasthttp's log lines to slog, bounded: fasthttp
// quotes what a client sent that it could not read, and any client can
// send anything, as often as it likes. A line keeps its first
// maxLogLine bytes, and at most one a second is written; the next one
// written says how many were left out.
type slogPrinter struct {
	log     *slog.Logger
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// maxLogLine bounds a line of fasthttp's in the log.
const maxLogLine = 256

func (p *slogPrinter) Printf(format string, args ...any) {
	p.mu.Lock()
	now := time.Now()
	if now.Sub(p.last) < time.Second {
		p.skipped++
		p.mu.Unlock()
		return
	}
	skipped := p.skipped
	p.last, p.skipped = now, 0
	p.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	if len(line) > maxLogLine {
		line = fmt.Sprintf("%s… (%d bytes more)", strings.ToValidUTF8(line[:maxLogLine], ""), len(line)-maxLogLine)
	}
	if skipped > 0 {
		p.log.Warn(line, "component", "fasthttp", "linesLeftOut", skipped)
		return
	}
	p.log.Warn(line, "component", "fasthttp")
}
