package sless

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Response is a handler's answer when it chooses its status or headers,
// or streams its body: return it, or a pointer to it, as the result.
//
//	return &sless.Response{Status: http.StatusNotFound, Body: map[string]string{"error": "no such order"}}, nil
type Response struct {
	// Status is the status code, from 200 to 599; 0 is 200, or 204 when
	// there is no body.
	Status int
	// Header holds the response's fields. A field may repeat (one
	// Set-Cookie per cookie) and keeps its values' order. A Content-Type
	// here wins over the one the body's type gives.
	Header http.Header
	// Body is encoded as a handler's result is: a string as text, []byte as
	// bytes, an io.Reader streamed as it is read (and closed after, when it
	// is an io.Closer), nil as no body, anything else as JSON.
	Body any
}

// streamChunk is how much of a streamed body is read at once; each read's
// bytes are sent on at once, so a body written in events arrives in them.
const streamChunk = 32 << 10

// writeResult answers with a handler's result: a Response as it says, an
// io.Reader streamed, nil as 204, anything else as encode makes it.
func writeResult(w http.ResponseWriter, r *http.Request, result any) {
	switch v := result.(type) {
	case *Response:
		if v == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeResponse(w, r, v)
	case Response:
		writeResponse(w, r, &v)
	default:
		writeResponse(w, r, &Response{Body: result})
	}
}

func writeResponse(w http.ResponseWriter, r *http.Request, resp *Response) {
	status := resp.Status
	if status != 0 && (status < 200 || status > 599) {
		closeBody(resp.Body)
		writeError(w, http.StatusInternalServerError, fmt.Errorf("response status %d: want 200 to 599", status))
		return
	}
	if resp.Body == nil {
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(orDefault(status, http.StatusNoContent))
		return
	}
	if body, ok := resp.Body.(io.Reader); ok {
		copyHeader(w.Header(), resp.Header)
		setDefault(w.Header(), "Content-Type", "application/octet-stream")
		w.WriteHeader(orDefault(status, http.StatusOK))
		stream(r.Context(), w, body)
		return
	}
	contentType, data, err := encode(resp.Body)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	copyHeader(w.Header(), resp.Header)
	setDefault(w.Header(), "Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(orDefault(status, http.StatusOK))
	_, _ = w.Write(data)
}

// stream sends body as it is read, each read's bytes at once, until it
// ends, the caller leaves (the body is closed then, which ends a read that
// waits on it) or it fails: the answer is then cut, never ended as if
// whole, and the failure goes to stderr.
func stream(ctx context.Context, w http.ResponseWriter, body io.Reader) {
	if c, ok := body.(io.Closer); ok {
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush() // the head at once: a stream's first event may take a while
	buf := make([]byte, streamChunk)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the caller left
			}
			_ = rc.Flush()
		}
		switch {
		case err == io.EOF:
			return
		case err != nil && ctx.Err() == nil:
			fmt.Fprintf(os.Stderr, "sless: response body: %v\n", err)
			panic(http.ErrAbortHandler) // net/http cuts the answer
		case err != nil:
			return
		}
	}
}

// encode chooses a body's bytes and Content-Type by its Go type: text
// for a string (HTML when it starts with "<"), raw bytes for []byte, and
// JSON for anything else.
func encode(body any) (contentType string, data []byte, err error) {
	switch v := body.(type) {
	case string:
		if strings.HasPrefix(v, "<") {
			return "text/html; charset=utf-8", []byte(v), nil
		}
		return "text/plain; charset=utf-8", []byte(v), nil
	case []byte:
		return "application/octet-stream", v, nil
	}
	data, err = json.Marshal(body)
	if err != nil {
		return "", nil, fmt.Errorf("encode result as JSON: %w", err)
	}
	return "application/json", data, nil
}

// copyHeader adds src's fields to dst, each field's values in order.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[http.CanonicalHeaderKey(k)] = append(dst[http.CanonicalHeaderKey(k)], vs...)
	}
}

func setDefault(h http.Header, key, value string) {
	if h.Get(key) == "" {
		h.Set(key, value)
	}
}

func orDefault(status, def int) int {
	if status == 0 {
		return def
	}
	return status
}

// closeBody closes a streamed body that will not be sent.
func closeBody(body any) {
	if c, ok := body.(io.Closer); ok {
		_ = c.Close()
	}
}
