// Package testfn is a user function process for tests of the request path:
// a real HTTP server in a child process (the test binary, run again) with
// endpoints that echo, block, sleep, send large bodies, drop the
// connection, or exit, and that counts its own concurrency.
//
// A test package opts in with a TestMain that calls RunIfChild first.
package testfn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"sless.dev/sless/internal/wire"
)

// childEnv marks the test binary run as the function process; its
// listener, opened by the parent so that no other process can take the
// port in between, is file descriptor 3. With childEnv=port, the process
// listens on 127.0.0.1:$PORT instead, as runtimes do.
const childEnv = "SLESS_TESTFN_CHILD"

// Command is how to start the function process as a runtime is started:
// it listens on 127.0.0.1:$PORT, which the caller adds to env.
func Command() (path string, args, env []string) {
	return os.Args[0], []string{"-test.run=^$"}, []string{childEnv + "=port"}
}

// RunIfChild serves as the function process and exits when the test binary
// was started by Start or Command; otherwise it returns at once.
func RunIfChild() {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return
	}
	var ln net.Listener
	var err error
	if mode == "port" {
		ln, err = net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	} else {
		ln, err = net.FileListener(os.NewFile(3, "listener"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testfn:", err)
		os.Exit(1)
	}
	// HTTP/1.1 and h2c both: it serves as either kind of user process.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	fmt.Fprintln(os.Stderr, (&http.Server{Handler: withGRPC(newHandler()), Protocols: &protocols}).Serve(ln))
	os.Exit(1)
}

// Echo is what /echo answers: the request as the function saw it.
type Echo struct {
	Method        string              `json:"method"`
	URI           string              `json:"uri"`
	Host          string              `json:"host"`
	Headers       map[string][]string `json:"headers"`
	Body          []byte              `json:"body"`
	ContentLength int64               `json:"contentLength"`
	Chunked       bool                `json:"chunked"`
}

type handler struct {
	inFlight, maxInFlight atomic.Int64
	mu                    sync.Mutex
	gates                 map[string]chan struct{}
	messages              map[string]*Deliveries
}

// Message is the body of a queue message for the function: what it does
// when delivered.
type Message struct {
	ID string `json:"id"`
	// Fail is how many deliveries of it fail (500) before one succeeds;
	// a negative number fails them all.
	Fail int `json:"fail,omitempty"`
	// SleepMs delays the answer; Block waits for /release?id=<ID>.
	SleepMs int  `json:"sleepMs,omitempty"`
	Block   bool `json:"block,omitempty"`
	// Exit ends the process (exit status 3) after the sleep and the block,
	// as a handler that crashes its runtime does.
	Exit bool `json:"exit,omitempty"`
}

// Deliveries is what /messages reports of each message delivered: how
// many times, and the headers of the last delivery.
type Deliveries struct {
	Count   int                 `json:"count"`
	Headers map[string][]string `json:"headers"`
}

func newHandler() http.Handler {
	h := &handler{gates: map[string]chan struct{}{}, messages: map[string]*Deliveries{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/echo", h.echo)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(wire.QueueHeader) != "" {
			h.track(h.message)(w, r)
			return
		}
		h.echo(w, r)
	})
	mux.HandleFunc("/messages", h.listMessages)
	mux.HandleFunc("/bytes", h.bytes)
	mux.HandleFunc("/sleep", h.track(h.sleep))
	mux.HandleFunc("/block", h.track(h.block))
	mux.HandleFunc("/release", h.release)
	mux.HandleFunc("/count", h.count)
	mux.HandleFunc("/drip", h.track(h.drip))
	mux.HandleFunc("/events", events)
	mux.HandleFunc("/max", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, h.maxInFlight.Swap(0))
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	mux.HandleFunc("/exit", func(http.ResponseWriter, *http.Request) { os.Exit(3) })
	mux.HandleFunc("/ws", h.track(webSocketEcho))
	mux.HandleFunc("/switch", func(w http.ResponseWriter, _ *http.Request) {
		// A 101 whatever was asked: a function breaking the protocol.
		if conn, brw, err := http.NewResponseController(w).Hijack(); err == nil {
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: nonsense\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			_ = conn.Close()
		}
	})
	return mux
}

// events is a streamed answer: an event at once, a second 2 ms later,
// as a function's event stream starts while it works on.
func events(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: 0\n\n")
	http.NewResponseController(w).Flush()
	time.Sleep(2 * time.Millisecond)
	_, _ = io.WriteString(w, "data: 1\n\n")
}

// webSocketEcho is a WebSocket server (gorilla/websocket, as a function
// would use) that sends each message back, and closes with a close frame
// (1000, "bye") when it gets "close". It answers its handshake with the
// request's X-Request-Id in the 101's Request-Id field.
func webSocketEcho(w http.ResponseWriter, r *http.Request) {
	upgrader := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := upgrader.Upgrade(w, r, http.Header{"Request-Id": {r.Header.Get("X-Request-Id")}})
	if err != nil {
		return // the upgrader answered 400
	}
	defer conn.Close()
	for {
		kind, msg, err := conn.ReadMessage()
		if err != nil {
			return
		}
		if string(msg) == "close" {
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
			return
		}
		if err := conn.WriteMessage(kind, msg); err != nil {
			return
		}
	}
}

func (h *handler) track(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := h.inFlight.Add(1)
		for m := h.maxInFlight.Load(); n > m && !h.maxInFlight.CompareAndSwap(m, n); m = h.maxInFlight.Load() {
		}
		defer h.inFlight.Add(-1)
		next(w, r)
	}
}

func (h *handler) echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e := Echo{Method: r.Method, URI: r.RequestURI, Host: r.Host, Headers: r.Header, Body: body,
		ContentLength: r.ContentLength, Chunked: len(r.TransferEncoding) > 0}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("X-Reply", "one")
	w.Header().Add("X-Reply", "two")
	w.Header().Set("Keep-Alive", "timeout=5") // hop-by-hop: must not reach the client
	// ?header=name:value adds any header, as a function may.
	for _, h := range r.URL.Query()["header"] {
		if name, value, ok := strings.Cut(h, ":"); ok {
			w.Header().Add(name, value)
		}
	}
	if code, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil {
		w.WriteHeader(code)
	}
	// ?fail-attempts=n answers 503 to a run's first n attempts.
	if n, err := strconv.Atoi(r.URL.Query().Get("fail-attempts")); err == nil {
		if at, _ := strconv.Atoi(r.Header.Get(wire.RunAttemptHeader)); at <= n {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}
	_ = json.NewEncoder(w).Encode(e)
}

// Pattern is the byte at offset i of a /bytes body.
func Pattern(i int) byte { return byte('a' + i%26) }

func (h *handler) bytes(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	buf := make([]byte, 32<<10)
	for off := 0; off < n; off += len(buf) {
		chunk := buf[:min(len(buf), n-off)]
		for i := range chunk {
			chunk[i] = Pattern(off + i)
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// count reads the body and answers its length and the sum of its bytes,
// so that large bodies are checked without echoing them.
func (h *handler) count(w http.ResponseWriter, r *http.Request) {
	var n, sum int64
	buf := make([]byte, 64<<10)
	for {
		k, err := r.Body.Read(buf)
		for _, b := range buf[:k] {
			sum += int64(b)
		}
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	_, _ = fmt.Fprintf(w, "%d %d", n, sum)
}

// drip sends the first half of a body of unknown length, waits for
// /release?id=, then sends the rest.
func (h *handler) drip(w http.ResponseWriter, r *http.Request) {
	part := bytes.Repeat([]byte("d"), 100<<10)
	_, _ = w.Write(part)
	http.NewResponseController(w).Flush()
	select {
	case <-h.gate(r.URL.Query().Get("id")):
		_, _ = w.Write(part)
	case <-r.Context().Done():
	}
}

func (h *handler) sleep(w http.ResponseWriter, r *http.Request) {
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	time.Sleep(time.Duration(ms) * time.Millisecond)
	_, _ = io.WriteString(w, "slept")
}

func (h *handler) gate(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.gates[id]
	if !ok {
		g = make(chan struct{})
		h.gates[id] = g
	}
	return g
}

// block waits until /release?id= is called with the same id.
func (h *handler) block(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.gate(r.URL.Query().Get("id")):
		_, _ = io.WriteString(w, "released")
	case <-r.Context().Done():
	}
}

// message plays a queue message's Message.
func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	var m Message
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		http.Error(w, "not a testfn.Message: "+err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	d := h.messages[m.ID]
	if d == nil {
		d = &Deliveries{}
		h.messages[m.ID] = d
	}
	d.Count++
	d.Headers = r.Header.Clone()
	n := d.Count
	h.mu.Unlock()
	time.Sleep(time.Duration(m.SleepMs) * time.Millisecond)
	if m.Block {
		select {
		case <-h.gate(m.ID):
		case <-r.Context().Done():
			return
		}
	}
	if m.Exit {
		os.Exit(3)
	}
	if m.Fail < 0 || n <= m.Fail {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, `{"error":"delivery %d of %s fails"}`, n, m.ID)
		return
	}
	_, _ = fmt.Fprintf(w, "done %s", m.ID)
}

func (h *handler) listMessages(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.messages)
}

func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	g := h.gate(r.URL.Query().Get("id"))
	select {
	case <-g:
	default:
		close(g)
	}
	_, _ = io.WriteString(w, "ok")
}

// Process is a running function process.
type Process struct {
	Port int
	t    testing.TB

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	// restarts, when set, restarts the process whenever it exits; closed,
	// it stops.
	restarts chan struct{}
	starts   int
}

// Start runs the function process on a free loopback port and stops it
// when the test ends. The port listens before Start returns; the process
// may not serve yet.
func Start(t testing.TB) *Process {
	t.Helper()
	p := &Process{t: t}
	p.Restart()
	t.Cleanup(p.Kill)
	return p
}

// Addr is the process's host:port.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// Restart starts the process again on the same port (after Kill or exit).
func (p *Process) Restart() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// start runs the process, with p.mu held. The listener is opened here and
// handed to the process, which then holds the only copy: once it dies,
// connections are refused.
func (p *Process) start() error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)))
	if err != nil {
		return fmt.Errorf("function process listener: %w", err)
	}
	if p.Port == 0 { // the first start; later ones keep the port
		p.Port = ln.Addr().(*net.TCPAddr).Port
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		return fmt.Errorf("function process listener: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start function process: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.starts++
	return nil
}

// RestartOnExit starts the process again each time it exits, as a kubelet
// restarts a container, until Kill.
func (p *Process) RestartOnExit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restarts != nil {
		return
	}
	p.restarts = make(chan struct{})
	go func(stop chan struct{}) {
		for {
			p.mu.Lock()
			exited := p.exited
			p.mu.Unlock()
			select {
			case <-stop:
				return
			case <-exited:
			}
			p.mu.Lock()
			if p.restarts != stop { // killed
				p.mu.Unlock()
				return
			}
			err := p.start()
			p.mu.Unlock()
			if err != nil {
				p.t.Errorf("restart: %v", err)
				return
			}
		}
	}(p.restarts)
}

// Starts is how many times the process was started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Kill stops the process, and its restarts, and waits for it.
func (p *Process) Kill() {
	p.mu.Lock()
	if p.restarts != nil {
		close(p.restarts)
		p.restarts = nil
	}
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Wait waits for the process to exit on its own.
func (p *Process) Wait() {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	<-exited
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
