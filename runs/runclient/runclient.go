// Package runclient calls the runs API of an activator over HTTP: submit
// a request as a run, read it (waiting for its end), read its answer,
// cancel it. The CLI and the FunctionRun controller use it; the API is
// the one any caller has, no back door to the store.
package runclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/runs"
)

// Client calls the runs API of the activator at Base (its invocation
// port: http://host[:port]).
type Client struct {
	Base string
	HTTP *http.Client // http.DefaultClient when nil
}

// StatusError is an answer the API gave instead of the one asked for:
// its status code and the error it said.
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Msg)
}

// Code is err's status code, 0 when the API gave no answer.
func Code(err error) int {
	if e, ok := errors.AsType[*StatusError](err); ok {
		return e.Code
	}
	return 0
}

// maxAnswer bounds the JSON answers read.
const maxAnswer = 1 << 20

// Submit sends req to the function namespace/name as a run, with key as
// its Idempotency-Key when set, and answers the run accepted.
func (c *Client) Submit(ctx context.Context, namespace, name, key string, req runs.Request) (runs.Accepted, error) {
	var a runs.Accepted
	path := req.Path
	if path == "" {
		path = "/"
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, c.Base+"/fn/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+path,
		bytes.NewReader(req.Body))
	if err != nil {
		return a, err
	}
	for _, f := range req.Header {
		hr.Header.Add(f[0], f[1])
	}
	hr.Header.Set("Prefer", runs.PreferAsync)
	if key != "" {
		hr.Header.Set(runs.IdempotencyKeyHeader, key)
	}
	err = c.do(hr, http.StatusAccepted, &a)
	if err == nil && !runs.ValidID(string(a.ID)) {
		err = fmt.Errorf("submit a run: the answer names no run: %+v", a)
	}
	return a, err
}

// Get reads run id; with wait above zero, the activator holds the answer
// until the run ends or wait passes (it bounds wait to a minute).
func (c *Client) Get(ctx context.Context, id runs.ID, wait time.Duration) (runs.Run, error) {
	var r runs.Run
	u := c.Base + runs.Path + url.PathEscape(string(id))
	if wait > 0 {
		u += "?wait=" + wait.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return r, err
	}
	return r, c.do(req, http.StatusOK, &r)
}

// Follow reads run id until it ended, each read held up to a minute.
func (c *Client) Follow(ctx context.Context, id runs.ID) (runs.Run, error) {
	for {
		r, err := c.Get(ctx, id, time.Minute)
		if err != nil || r.State.Ended() {
			return r, err
		}
	}
}

// Cancel cancels run id, answering it as it is after.
func (c *Client) Cancel(ctx context.Context, id runs.ID) (runs.Run, error) {
	var r runs.Run
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.Base+runs.Path+url.PathEscape(string(id)), nil)
	if err != nil {
		return r, err
	}
	return r, c.do(req, http.StatusOK, &r)
}

// Result is the answer of r, an ended run read before, as the function
// gave it: the caller reads and closes its body. An answer whose status is
// not the run's is the activator's own (409 before the run ended, 503
// when its store cannot be read): a *StatusError.
func (c *Client) Result(ctx context.Context, r runs.Run) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+runs.Path+url.PathEscape(string(r.ID))+"/result", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the run's answer: %w", err)
	}
	if resp.StatusCode != r.Status {
		defer resp.Body.Close()
		return nil, statusError(resp)
	}
	return resp, nil
}

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// do sends req and decodes its answer into v, or the API's error.
func (c *Client) do(req *http.Request, want int, v any) error {
	resp, err := c.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return statusError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v); err != nil {
		return fmt.Errorf("%s %s: the answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// statusError reads an answer's {"error": ...}.
func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	var e struct{ Error string }
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(body))
	}
	return &StatusError{Code: resp.StatusCode, Msg: e.Error}
}

// RequestOf is the request a FunctionRun's spec makes of its function: a
// body that is a JSON string is sent as its text (text/plain), any other
// JSON value as JSON (application/json), unless Headers name a
// Content-Type. The controller on a cluster and sless dev both submit it.
func RequestOf(s *v1alpha1.FunctionRunSpec) (runs.Request, error) {
	req := runs.Request{Method: s.Method, Path: s.Path}
	if req.Method == "" {
		req.Method = http.MethodPost
	}
	contentType := ""
	if b := s.Body; b != nil && len(b.Raw) > 0 {
		var text string
		if err := json.Unmarshal(b.Raw, &text); err == nil {
			req.Body, contentType = []byte(text), "text/plain; charset=utf-8"
		} else if json.Valid(b.Raw) {
			req.Body, contentType = b.Raw, "application/json"
		} else {
			return req, errors.New("s.body is not JSON")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		req.Header = append(req.Header, [2]string{k, s.Headers[k]})
		if http.CanonicalHeaderKey(k) == "Content-Type" {
			contentType = ""
		}
	}
	if contentType != "" {
		req.Header = append(req.Header, [2]string{"Content-Type", contentType})
	}
	return req, nil
}
