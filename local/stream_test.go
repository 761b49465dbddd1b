package local

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"
)

// streamHandlers hold, in each runtime, a function whose /events answers
// one event, then holds the second until /release is asked: its first
// event can only reach the caller before the answer ends if every hop
// streams it.
var streamHandlers = map[string][2]string{
	"go": {"events.go", `package events

import (
	"io"
	"net/http"
	"sync"
	"time"
)

var (
	released = make(chan struct{})
	once     sync.Once
)

func Handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/release" {
		once.Do(func() { close(released) })
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "data: one\n\n")
	w.(http.Flusher).Flush()
	select {
	case <-released:
		io.WriteString(w, "data: two\n\n")
	case <-time.After(30 * time.Second):
		io.WriteString(w, "data: late\n\n")
	}
}
`},
	"python": {"main.py", `import threading
from sless import Response

released = threading.Event()

def handle(event):
    if event["path"] == "/release":
        released.set()
        return None
    def events():
        yield "data: one\n\n"
        yield "data: two\n\n" if released.wait(30) else "data: late\n\n"
    return Response(events(), headers={"Content-Type": "text/event-stream"})
`},
	"node": {"index.js", `let release;
const released = new Promise((resolve) => { release = resolve; });

async function* events() {
  yield 'data: one\n\n';
  const late = new Promise((resolve) => setTimeout(() => resolve(false), 30000).unref());
  yield (await Promise.race([released.then(() => true), late])) ? 'data: two\n\n' : 'data: late\n\n';
}

exports.handle = (event) => {
  if (event.path === '/release') { release(); return undefined; }
  const headers = { 'content-type': 'text/event-stream' };
  return new Response(require('node:stream').Readable.toWeb(require('node:stream').Readable.from(events())), { headers });
};
`},
}

// A streamed answer passes the activator and the queue-proxy as it is
// written, in every runtime: its first event reaches the caller while the
// handler still holds the second.
func TestStreamsThroughThePlatform(t *testing.T) {
	needs.Commands(t, "python3", "node", "go")
	dir := t.TempDir()
	var manifests string
	handlers := map[string]string{"go": "Handle", "python": "main.handle", "node": "index.handle"}
	for runtime, file := range streamHandlers {
		src := filepath.Join(dir, "events-"+runtime)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(src, file[0]), file[1])
		manifests += "---\napiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: events-" + runtime + "}\n" +
			"spec: {runtime: " + runtime + ", source: ./events-" + runtime + ", handler: " + handlers[runtime] + ", scale: {min: 1, max: 1}}\n"
	}
	write(t, filepath.Join(dir, "functions.yaml"), manifests)
	p := runPlatform(t, dir, 50*time.Millisecond)
	for runtime := range streamHandlers {
		t.Run(runtime, func(t *testing.T) {
			fn := "http://" + p.Addr() + "/fn/default/events-" + runtime
			p.with(t).waitFor("events-"+runtime+" ready", 10*time.Minute, func() bool { return p.status("events-"+runtime).Ready == 1 })
			resp, err := p.client.Get(fn + "/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
				t.Fatalf("first event: %q %v", line, err)
			}
			released, err := p.client.Get(fn + "/release")
			if err != nil {
				t.Fatal(err)
			}
			released.Body.Close()
			rest, err := io.ReadAll(r)
			if err != nil || string(rest) != "\ndata: two\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("after the first event: %q %v, Content-Type %q: want the second, released, event", rest, err, resp.Header.Get("Content-Type"))
			}
		})
	}
}
