package sless

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// handlerServer serves a Handler as the runtime does.
func handlerServer(t *testing.T, h Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(healthz{server{maxBody: maxBodyBytes, h: h}})
	t.Cleanup(srv.Close)
	return srv
}

// A Response's repeated fields reach the caller, each value in its order.
func TestResponseHeaders(t *testing.T) {
	srv := handlerServer(t, func(context.Context, Event) (any, error) {
		return &Response{Status: http.StatusNotFound, Header: http.Header{
			"Set-Cookie": {"a=1; Path=/", "b=2; Path=/", "c=3; Path=/"},
			"x-trace":    {"t1"},
		}, Body: "gone"}, nil
	})
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := []string{"a=1; Path=/", "b=2; Path=/", "c=3; Path=/"}; resp.StatusCode != 404 || !reflect.DeepEqual(resp.Header.Values("Set-Cookie"), want) ||
		resp.Header.Get("X-Trace") != "t1" {
		t.Errorf("got %d, Set-Cookie %q, X-Trace %q: want 404, %q and t1", resp.StatusCode, resp.Header.Values("Set-Cookie"), resp.Header.Get("X-Trace"), want)
	}
}

// A streamed body reaches the caller as it is written: the first event
// arrives while the handler's writer still holds the second.
func TestStreamArrivesAsWritten(t *testing.T) {
	read := make(chan struct{})
	srv := handlerServer(t, func(context.Context, Event) (any, error) {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, "data: one\n\n")
			<-read
			_, _ = io.WriteString(pw, "data: two\n\n")
			pw.Close()
		}()
		return &Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr}, nil
	})
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	close(read)
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: two\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the rest: %q %v, type %q", rest, err, resp.Header.Get("Content-Type"))
	}
}

type failingReader struct{ sent bool }

func (f *failingReader) Read(p []byte) (int, error) {
	if !f.sent {
		f.sent = true
		return copy(p, "half"), nil
	}
	return 0, errors.New("disk on fire")
}

// A body that fails mid-stream cuts the answer: the caller sees it end
// early, never a whole answer.
func TestStreamFailureCutsTheAnswer(t *testing.T) {
	srv := handlerServer(t, func(context.Context, Event) (any, error) { return &failingReader{}, nil })
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil || string(body) != "half" {
		t.Errorf("read %q, %v: want half and an error", body, err)
	}
}

// A caller that leaves closes the streamed body, ending its writer's wait.
func TestStreamClosedWhenCallerLeaves(t *testing.T) {
	written := make(chan error, 1)
	srv := handlerServer(t, func(context.Context, Event) (any, error) {
		pr, pw := io.Pipe()
		go func() {
			for { // until the body is closed: the caller stops reading, and the writes wait
				if _, err := io.WriteString(pw, "first"); err != nil {
					written <- err
					return
				}
			}
		}()
		return pr, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first bytes %q %v", buf, err)
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-written:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("the writer's wait ended with %v, want io.ErrClosedPipe", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the streamed body was not closed after the caller left")
	}
}

// A function written as an http.Handler gets the request as net/http
// gives it and answers as it will, streaming with http.Flusher; the
// runtime still answers /healthz.
func TestHTTPHandler(t *testing.T) {
	read := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "got "+string(body)+"\n")
		w.(http.Flusher).Flush()
		<-read
		_, _ = io.WriteString(w, "done")
	})
	srv := httptest.NewServer(healthz{h})
	defer srv.Close()
	if status, _, body := send(t, http.MethodGet, srv.URL+"/healthz", nil); status != 200 || body != "ok" {
		t.Errorf("GET /healthz = %d %q, want the runtime's ok", status, body)
	}
	resp, err := http.Post(srv.URL+"/orders", "text/plain", strings.NewReader("order"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	close(read)
	rest, _ := io.ReadAll(r)
	if resp.StatusCode != 201 || line != "got order\n" || err != nil || string(rest) != "done" ||
		!reflect.DeepEqual(resp.Header.Values("Set-Cookie"), []string{"a=1", "b=2"}) {
		t.Errorf("got %d %q %q (%v), cookies %q", resp.StatusCode, line, rest, err, resp.Header.Values("Set-Cookie"))
	}
}

// An http.Handler function can take over its connection (a WebSocket
// library does so): ResponseController.Hijack works in the runtime.
func TestHTTPHandlerHijacks(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	})
	srv := httptest.NewServer(healthz{h})
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: fn\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	_, _ = io.WriteString(conn, "hello\n")
	if line, err := r.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Errorf("after the upgrade: %q %v", line, err)
	}
}
