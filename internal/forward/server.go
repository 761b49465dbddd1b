package forward

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// NewServer returns a fasthttp server set up for a proxy hop: request
// bodies streamed and bounded by maxBody, heads up to 16 KiB, and nothing
// added to the answers that the next hop did not send (no default Server,
// Content-Type or Date headers). Callers add their own timeouts and
// concurrency bound.
func NewServer(handler fasthttp.RequestHandler, onReadError func(*fasthttp.RequestCtx, error), maxBody int64, log *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      handler,
		ErrorHandler:                 onReadError,
		ReadBufferSize:               16 << 10, // the longest request head
		MaxRequestBodySize:           int(maxBody),
		StreamRequestBody:            true,
		IdleTimeout:                  90 * time.Second,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		NoDefaultDate:                true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		Logger:                       slogPrinter{log},
	}
}

// slogPrinter routes fasthttp's log lines to slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(format string, args ...any) {
	p.log.Warn(fmt.Sprintf(format, args...), "component", "fasthttp")
}
