package report

import (
	"bytes"
	"context"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/load"
	"sless.dev/sless/load/queue"
)

// run loads a real server for two seconds, ramping up, with instances as
// a platform would report them.
func run(t *testing.T) Run {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if n.Add(1)%50 == 0 {
			ctx.SetStatusCode(503)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	url := "http://" + ln.Addr().String() + "/"
	res, err := load.Run(context.Background(), load.Options{URL: url, Steps: []load.Step{{From: 50, To: 300, For: 2 * time.Second}}, Connections: 16})
	if err != nil {
		t.Fatal(err)
	}
	r := Run{URL: url, Started: time.Now(), Rate: "50:300:2s", Connections: 16, Result: res}
	for i := range 3 {
		r.Platform = append(r.Platform, PlatformSample{At: time.Duration(i) * time.Second, State: "ready", Desired: i + 1, Ready: i})
	}
	return r
}

// The report's plots exist, decode as PNG of the expected size, and its
// page links each one; the run survives its JSON file and compares.
func TestReport(t *testing.T) {
	r := run(t)
	dir := t.ArtifactDir()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, Files.Page))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Files.Latency, Files.CDF, Files.Throughput} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 384 {
			t.Errorf("%s is %dx%d, want 768x384", name, b.Dx(), b.Dy())
		}
		if !bytes.Contains(page, []byte("]("+name+")")) {
			t.Errorf("the page does not embed %s:\n%s", name, page)
		}
	}
	if !bytes.Contains(page, []byte("status codes  200: ")) || !bytes.Contains(page, []byte("503: ")) {
		t.Errorf("the page's summary:\n%s", page)
	}

	file := filepath.Join(dir, "run.json")
	if err := WriteJSON(file, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(file)
	if err != nil {
		t.Fatal(err)
	}
	if back.Result.Requests != r.Result.Requests || back.Result.Latency != r.Result.Latency || len(back.Platform) != 3 {
		t.Errorf("after JSON: %d requests, %+v, %d samples", back.Result.Requests, back.Result.Latency, len(back.Platform))
	}
	var out strings.Builder
	if err := Compare(&out, "a", "b", r, back); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1.00x") || !strings.Contains(out.String(), "p99") {
		t.Errorf("a run against itself:\n%s", out.String())
	}
	if _, err := ReadJSON(filepath.Join(dir, Files.Page)); err == nil {
		t.Error("a Markdown page read as a run")
	}
}

// A queue run's report is its drain: the queue's depth with the instances.
func TestDrainReport(t *testing.T) {
	r := Run{URL: "amqp://127.0.0.1:5672/ queue q", Started: time.Now(), Queue: &queue.Result{Queue: "q", Messages: 100,
		Published: time.Second, Drained: 3 * time.Second, Rate: 33.3, ByProcessed: true,
		Depth: []queue.Depth{{At: 0, Ready: 100}, {At: time.Second, Ready: 60}, {At: 2 * time.Second, Ready: 0}}},
		Platform: []PlatformSample{{At: 0, State: "idle"}, {At: time.Second, State: "ready", Desired: 2, Ready: 1}}}
	dir := t.TempDir()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, Files.Drain))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() != 768 {
		t.Fatalf("drain plot: %v", err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, Files.Page))
	if !bytes.Contains(page, []byte("]("+Files.Drain+")")) || !bytes.Contains(page, []byte("33.3 messages/s")) {
		t.Errorf("page:\n%s", page)
	}
	if _, err := os.Stat(filepath.Join(dir, Files.Latency)); err == nil {
		t.Error("a queue run has a latency plot")
	}
}
