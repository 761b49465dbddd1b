package fnimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/eventually"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/internal/wheeltest"
	"sless.dev/sless/ociimage"
	"sless.dev/sless/runtimes"
)

// extract writes img's filesystem under a new directory and returns it.
func extract(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, h.FileInfo().Mode().Perm())
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// serve runs an image's program (args, already made to point into its
// extracted root) with env and PORT, and returns its URL once it is
// healthy.
func serve(t *testing.T, args, env []string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(env, "PORT="+port)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + port
	eventually.True(t, "the function healthy", func() bool {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	return url
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	return string(body)
}

func config(t *testing.T, img v1.Image) v1.Config {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Config
}

// A Go function's image holds its static binary on the minimal base, runs
// it as the non-root user from the source directory, and the binary
// serves the function; the source is there, its version control is not.
func TestGoImage(t *testing.T) {
	needs.Commands(t, "go")
	src, err := filepath.Abs("../config/samples/functions/hello-go")
	if err != nil {
		t.Fatal(err)
	}
	b := &Builder{Runtimes: runtimes.Options{CacheDir: t.TempDir()}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := b.Build(ctx, runtimes.Source{Namespace: "default", Name: "hello", Runtime: v1alpha1.RuntimeGo, Dir: src, Handler: "Handle"})
	if err != nil {
		t.Fatal(err)
	}
	c := config(t, img)
	if c.User != ociimage.NonRootUser || c.WorkingDir != runtimes.ImageSourceDir || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/hello"}) {
		t.Errorf("config %+v: want user %s in %s running /usr/local/bin/hello", c, ociimage.NonRootUser, runtimes.ImageSourceDir)
	}
	root := extract(t, img)
	if _, err := os.Stat(filepath.Join(root, "function/hello.go")); err != nil {
		t.Errorf("the source is not in the image: %v", err)
	}
	out, err := exec.Command("file", filepath.Join(root, "usr/local/bin/hello")).Output()
	if err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("the binary is not static: %s", out)
	}
	url := serve(t, []string{filepath.Join(root, "usr/local/bin/hello")}, nil)
	if body := get(t, url+"/?name=image"); !strings.Contains(body, "image") {
		t.Errorf("the function answered %q", body)
	}
}

// A Go function's image is the same from any checkout and any cache, with
// or without a go.mod of its own, and holds no path of the building
// machine: the build information's replaced modules are named by paths
// relative to the generated module, not where the source and the SDK are.
// A compile error still names the source file where it is.
func TestGoImageReproducible(t *testing.T) {
	needs.Commands(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]map[string]string{
		"without go.mod": {"hello.go": "package hello\n\nimport (\n\t\"context\"\n\n\t\"sless.dev/sless/runtimes/go/sless\"\n)\n\n" +
			"func Handle(context.Context, sless.Event) (any, error) { return \"hi\", nil }\n"},
		"with go.mod": {"go.mod": "module example.test/hello\n\ngo 1.24\n", "hello.go": "package hello\n\nimport \"net/http\"\n\n" +
			"func Handle(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(\"hi\")) }\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var digests []v1.Hash
			var machine []string // paths of the building machine
			for range 2 {
				dir, cache := t.TempDir(), t.TempDir()
				for f, content := range files {
					if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				b := &Builder{Runtimes: runtimes.Options{CacheDir: cache}}
				img, err := b.Build(ctx, runtimes.Source{Namespace: "default", Name: "hello", Runtime: v1alpha1.RuntimeGo, Dir: dir, Handler: "Handle"})
				if err != nil {
					t.Fatal(err)
				}
				d, err := img.Digest()
				if err != nil {
					t.Fatal(err)
				}
				digests = append(digests, d)
				machine = append(machine, dir, cache)
				bin, err := os.ReadFile(filepath.Join(extract(t, img), "usr/local/bin/hello"))
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range append(machine, strings.TrimSpace(string(goroot))) {
					if bytes.Contains(bin, []byte(p)) {
						t.Errorf("the binary holds the building machine's %s", p)
					}
				}
			}
			if digests[0] != digests[1] {
				t.Errorf("two checkouts built %s and %s", digests[0], digests[1])
			}
		})
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.go"), []byte("package hello\n\nfunc Handle( {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &Builder{Runtimes: runtimes.Options{CacheDir: t.TempDir()}}
	_, err = b.Build(ctx, runtimes.Source{Namespace: "default", Name: "broken", Runtime: v1alpha1.RuntimeGo, Dir: dir, Handler: "Handle"})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "hello.go")+":3") {
		t.Errorf("a compile error: %v, want it to name %s", err, filepath.Join(dir, "hello.go:3"))
	}
}

// A Python function's image holds its source, the runtime script and the
// dependencies of its requirements.txt on the base it is given, and starts
// python3 on the script; what it holds serves the function.
func TestPythonImage(t *testing.T) {
	needs.Commands(t, "python3")
	wheel := wheeltest.Build(t, "slesstiny", map[string]string{"slesstiny/__init__.py": "VALUE = 'from the wheel'\n"})
	src := t.TempDir()
	for name, content := range map[string]string{
		"main.py":          "import slesstiny\n\ndef handle(event):\n    return slesstiny.VALUE\n",
		"requirements.txt": wheel + "\n",
		".git/HEAD":        "ref",
		"__pycache__/x":    "stale",
	} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := filepath.Join(t.TempDir(), "base")
	static, err := ociimage.Static()
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteLayout(base, static, "v1"); err != nil {
		t.Fatal(err)
	}
	b := &Builder{Runtimes: runtimes.Options{CacheDir: t.TempDir()}, Bases: map[v1alpha1.Runtime]string{v1alpha1.RuntimePython: base + ":v1"}}
	img, err := b.Build(context.Background(), runtimes.Source{Namespace: "default", Name: "py", Runtime: v1alpha1.RuntimePython, Dir: src, Handler: "main.handle"})
	if err != nil {
		t.Fatal(err)
	}
	c := config(t, img)
	if !slices.Equal(c.Entrypoint, []string{"python3", "/opt/sless/sless_runtime.py"}) || !slices.Contains(c.Env, "PYTHONPATH=/opt/sless/deps") ||
		!slices.Contains(c.Env, "SLESS_SOURCE=/function") || c.User != ociimage.NonRootUser {
		t.Errorf("config %+v", c)
	}
	root := extract(t, img)
	for _, gone := range []string{"function/.git", "function/__pycache__"} {
		if _, err := os.Stat(filepath.Join(root, gone)); err == nil {
			t.Errorf("%s is in the image", gone)
		}
	}
	// The image's paths, under the extracted root, run by this machine's
	// python3 in place of the base's.
	env := []string{"SLESS_SOURCE=" + filepath.Join(root, "function"), "SLESS_HANDLER=main.handle",
		"PYTHONPATH=" + filepath.Join(root, "opt/sless/deps"), "PYTHONDONTWRITEBYTECODE=1"}
	url := serve(t, []string{"python3", filepath.Join(root, "opt/sless/sless_runtime.py")}, env)
	if body := get(t, url+"/"); body != "from the wheel" {
		t.Errorf("the function answered %q, want its dependency's value", body)
	}
}

// A runtime's base comes from the base registry unless named; a base
// that cannot be read is an error naming the runtime.
func TestBaseRefs(t *testing.T) {
	b := &Builder{BaseRegistry: "127.0.0.1:1/bases"}
	_, err := b.Base(context.Background(), v1alpha1.RuntimeNode)
	if err == nil || !strings.Contains(err.Error(), "base image of node functions") || !strings.Contains(err.Error(), "127.0.0.1:1/bases/runtime-node:latest") {
		t.Errorf("Base(node) from an unreachable registry: %v", err)
	}
	if img, err := b.Base(context.Background(), v1alpha1.RuntimeGo); err != nil || img == nil {
		t.Errorf("Base(go) = %v, %v: want the static base, built here", img, err)
	}
}
