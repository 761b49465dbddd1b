package local

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/testfn"
)

// serversDir holds the samples of Functions that bring their own server.
const serversDir = "../config/samples/servers"

// The samples that bring their own server, a Node and a Python one, run
// from their manifests' commands: each answers through the activator,
// told its route's prefix and none of a client's forwarding fields, and
// serves a WebSocket echo through both hops.
func TestOwnServers(t *testing.T) {
	needs.Commands(t, "python3", "node")
	p := runPlatform(t, serversDir, 500*time.Millisecond)
	names := []string{"server-node", "server-python"}
	for _, name := range names {
		p.waitFor(name+" loaded", 30*time.Second, func() bool { st := p.status(name).State; return st == "idle" || st == "ready" })
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr()+"/fn/default/"+name+"/", nil)
			req.Header.Set("X-Forwarded-Proto", "https") // a caller's claim, not the platform's
			resp, err := p.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Server, Method, Prefix, Proto, Host string }
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			want := strings.TrimPrefix(name, "server-")
			if err != nil || resp.StatusCode != 200 || got.Server != want || got.Prefix != "/fn/default/"+name || got.Proto != "" || got.Host != p.Addr() {
				t.Errorf("GET / = %d %+v, %v; want 200 from %s, prefix /fn/default/%s, no proto, host %s", resp.StatusCode, got, err, want, name, p.Addr())
			}
			if st := p.status(name); st.Runtime != "" || st.State != "ready" {
				t.Errorf("status: runtime %q, state %q; want none, ready", st.Runtime, st.State)
			}
			conn, _ := testfn.DialWebSocket(t, "ws://"+p.Addr()+"/fn/default/"+name+"/ws")
			testfn.CheckEcho(t, conn)
			testfn.CloseHandshake(t, conn)
		})
	}
}

// A command that names no program is a failed function, its error naming
// the program, and what is already running stays; nothing is started.
func TestOwnServerBadCommand(t *testing.T) {
	needs.Commands(t, "python3")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "srv", "server.py"), "")
	write(t, filepath.Join(dir, "functions.yaml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: typo}
spec: {source: ./srv, command: [pyhton3, server.py]}
---
apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: script}
spec: {source: ./srv, command: [./server.py]}
`)
	p := runPlatform(t, dir, 50*time.Millisecond)
	for name, want := range map[string]string{
		"typo":   `command "pyhton3": exec: "pyhton3": executable file not found in $PATH`,
		"script": `command "./server.py": ` + filepath.Join(dir, "srv", "server.py") + " is not executable",
	} {
		p.waitFor(name+" failed", time.Minute, func() bool { return p.status(name).State == "failed" })
		if st := p.status(name); !strings.Contains(st.Error, want) {
			t.Errorf("%s: error %q, want %q", name, st.Error, want)
		}
		resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/" + name + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "pyhton3") && name == "typo" {
			t.Errorf("%s: a call answered %d %q, want 503 naming the cause", name, resp.StatusCode, body)
		}
	}
}

// A command names the Function's variables and its port as a Kubernetes
// container's does, $(NAME): Python's own file server serves a directory
// as a Function, its healthz a file.
func TestOwnServerCommandExpansion(t *testing.T) {
	needs.Commands(t, "python3")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "www"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "www", "healthz"), "ok")
	write(t, filepath.Join(dir, "www", "hello.txt"), "hello from a file")
	write(t, filepath.Join(dir, "functions.yaml"), `apiVersion: sless.dev/v1alpha1
kind: Function
metadata: {name: files}
spec:
  source: ./www
  command: [python3, -m, http.server, $(PORT), --bind, $(BIND)]
  env: [{name: BIND, value: 127.0.0.1}]
`)
	p := runPlatform(t, dir, 50*time.Millisecond)
	var code int
	var body []byte
	p.waitFor("the file served", time.Minute, func() bool {
		resp, err := p.client.Get("http://" + p.Addr() + "/fn/default/files/hello.txt")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
		return code != http.StatusNotFound // until the activator knows it
	})
	if code != 200 || string(body) != "hello from a file" {
		t.Errorf("GET /hello.txt = %d %q, want the file", code, body)
	}
}
