package sless

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// maxBodyBytes bounds the request body a handler is given: the event
	// holds it in memory whole.
	maxBodyBytes = 64 << 20
	// shutdownTimeout bounds how long a stopping process waits for the
	// requests in flight; the platform kills it soon after anyway.
	shutdownTimeout = 30 * time.Second
	// readHeaderTimeout drops connections that never send a request.
	readHeaderTimeout = 10 * time.Second
)

// Serve answers invocations with h on 127.0.0.1:$PORT until SIGTERM or
// SIGINT, then finishes the requests in flight and returns. It exits the
// process with status 1 and a message on stderr when it cannot listen.
func Serve(h Handler) { serveOrExit(server{h: h, maxBody: maxBodyBytes}) }

// ServeHTTP is Serve for a function written as an http.Handler (or a
// func(http.ResponseWriter, *http.Request), as http.HandlerFunc): it gets
// each request as net/http gives it, its body a stream, and answers as it
// will: any status and headers, a body streamed with http.Flusher, a
// connection taken over with http.ResponseController's Hijack.
func ServeHTTP(h http.Handler) { serveOrExit(h) }

func serveOrExit(h http.Handler) {
	if err := run(h); err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		os.Exit(1)
	}
}

func run(h http.Handler) error {
	port := os.Getenv("PORT")
	if port == "" {
		return errors.New("PORT is not set: the platform sets it to the port to listen on")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return fmt.Errorf("cannot serve: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return serve(ctx, ln, h)
}

// serve answers on ln until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	// HTTP/1.1, and HTTP/2 without TLS for a Function whose protocol is
	// h2c (a gRPC server served as an http.Handler): the queue-proxy
	// speaks the one the Function says.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: healthz{h}, ReadHeaderTimeout: readHeaderTimeout, Protocols: &protocols}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// healthz answers the platform's GET /healthz, whatever the function's
// form: the process is ready once it answers. Every other request is the
// function's.
type healthz struct{ next http.Handler }

func (h healthz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "ok")
		return
	}
	h.next.ServeHTTP(w, r)
}

// server turns each request into one call of a Handler.
type server struct {
	h       Handler
	maxBody int64
}

func (s server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", s.maxBody))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Errorf("read request body: %w", err))
		return
	}
	result, err := call(r.Context(), s.h, newEvent(r, body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeResult(w, r, result)
}

// call runs h, turning a panic into an error so that one bad request
// does not take down the instance and the requests it serves.
func call(ctx context.Context, h Handler, e Event) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(os.Stderr, "sless: handler panicked: %v\n%s", v, debug.Stack())
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return h(ctx, e)
}

func newEvent(r *http.Request, body []byte) Event {
	query := make(map[string]string)
	for k, vs := range r.URL.Query() {
		query[k] = vs[0] // the first, as in Python and Node
	}
	headers := make(map[string]string, len(r.Header)+1)
	for k, vs := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	headers["host"] = r.Host
	return Event{Method: r.Method, Path: r.URL.Path, Query: query, Headers: headers, Body: body}
}

// writeError answers {"error": "..."}, the shape every runtime uses.
func writeError(w http.ResponseWriter, status int, err error) {
	data, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
