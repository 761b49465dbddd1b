package deploy

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/fnimage"
	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/needs"
	"sless.dev/sless/ociimage"
	"sless.dev/sless/runtimes"
)

// testRegistry is a registry in this process that counts the manifests
// pushed to it.
func testRegistry(t *testing.T) (host string, pushes *atomic.Int64) {
	t.Helper()
	pushes = &atomic.Int64{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
			pushes.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), pushes
}

// manifestDir writes files (path → content) into a new directory.
func manifestDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	goSource    = "package hello\n\nimport (\n\t\"context\"\n\n\t\"sless.dev/sless/runtimes/go/sless\"\n)\n\nfunc Handle(ctx context.Context, e sless.Event) (any, error) { return \"hi\", nil }\n"
	goManifest  = "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: hello}\nspec: {runtime: go, source: ./hello, handler: Handle}\n"
	imageOnly   = "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: prebuilt, namespace: team, labels: {team: a}}\nspec: {runtime: python, image: example.test/prebuilt:1}\n"
	ownServer   = "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: server}\nspec: {source: ./server, command: [node, server.js], image: example.test/server:1}\n"
	brokenGo    = "package broken\n\nfunc Handle( {\n"
	brokenYAML  = "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: Bad_Name}\nspec: {runtime: go, source: ./hello}\n"
	brokenBuild = "apiVersion: sless.dev/v1alpha1\nkind: Function\nmetadata: {name: broken}\nspec: {runtime: go, source: ./broken, handler: Handle}\n"
)

func builder(t *testing.T) *fnimage.Builder {
	return &fnimage.Builder{Runtimes: runtimes.Options{CacheDir: t.TempDir()}}
}

func functions(t *testing.T, c client.Client) map[string]v1alpha1.Function {
	t.Helper()
	var list v1alpha1.FunctionList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]v1alpha1.Function{}
	for _, f := range list.Items {
		got[f.Namespace+"/"+f.Name] = f
	}
	return got
}

// A directory of manifests goes to the cluster: the Function with a
// source runs the image pushed for it, by digest; the one with an image
// runs that image, its labels kept, and so does the one that brings its
// own server, although it has a source. Deploying again changes nothing.
func TestDeploy(t *testing.T) {
	needs.Commands(t, "go")
	c := controlplane.Client(t, controlplane.Start(t))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	host, pushes := testRegistry(t)
	dir := manifestDir(t, map[string]string{"hello/hello.go": goSource, "hello.yaml": goManifest, "prebuilt.yaml": imageOnly,
		"server/server.js": "", "server.yaml": ownServer})
	fns, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	o := Options{Registry: host + "/fns", Builder: builder(t), Client: c, Progress: &progress}
	deployed, err := Run(context.Background(), fns, o)
	if err != nil {
		t.Fatal(err)
	}
	got := functions(t, c)
	hello, prebuilt := got["default/hello"], got["team/prebuilt"]
	if !strings.HasPrefix(hello.Spec.Image, host+"/fns/default/hello@sha256:") || hello.Spec.Runtime != v1alpha1.RuntimeGo {
		t.Errorf("default/hello runs %q, want the pushed digest", hello.Spec.Image)
	}
	if prebuilt.Spec.Image != "example.test/prebuilt:1" || prebuilt.Labels["team"] != "a" {
		t.Errorf("team/prebuilt: image %q, labels %v", prebuilt.Spec.Image, prebuilt.Labels)
	}
	if server := got["default/server"]; server.Spec.Image != "example.test/server:1" || !slices.Equal(server.Spec.Command, []string{"node", "server.js"}) {
		t.Errorf("default/server runs %q %q, want its own image and command", server.Spec.Image, server.Spec.Command)
	}
	if len(deployed) != 3 || pushes.Load() != 1 || !strings.Contains(progress.String(), "default/hello: pushed "+hello.Spec.Image) {
		t.Errorf("deployed %+v with %d pushes; progress:\n%s", deployed, pushes.Load(), progress.String())
	}
	img, err := ociimage.Read(context.Background(), hello.Spec.Image)
	if err != nil {
		t.Fatalf("the image the Function names: %v", err)
	}
	if cfg, err := img.ConfigFile(); err != nil || cfg.Config.Labels["dev.sless.function"] != "default/hello" {
		t.Errorf("its config: %v %v", cfg, err)
	}

	if _, err := Run(context.Background(), fns, o); err != nil {
		t.Fatal(err)
	}
	if again := functions(t, c)["default/hello"]; again.Spec.Image != hello.Spec.Image || again.Generation != hello.Generation {
		t.Errorf("a second deploy of the same source: image %s (generation %d), was %s (%d)", again.Spec.Image, again.Generation, hello.Spec.Image, hello.Generation)
	}
}

// Bad input changes nothing on the cluster: an invalid manifest is
// refused before any build; a failed build, a registry that cannot be
// reached, or an apply the API server would refuse applies none of the
// Functions; each error names the function and the cause.
func TestDeployChangesNothingOnError(t *testing.T) {
	needs.Commands(t, "go")
	c := controlplane.Client(t, controlplane.Start(t))
	host, pushes := testRegistry(t)

	invalid := manifestDir(t, map[string]string{"hello/hello.go": goSource, "hello.yaml": goManifest, "bad.yaml": brokenYAML})
	if _, err := Load(invalid, ""); err == nil || !strings.Contains(err.Error(), "metadata.name") || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("Load of an invalid manifest: %v, want the file and the field", err)
	}

	imageless := manifestDir(t, map[string]string{"server/server.js": "", "server.yaml": strings.Replace(ownServer, ", image: example.test/server:1", "", 1)})
	if _, err := Load(imageless, ""); err == nil || !strings.Contains(err.Error(), "spec.image: Required value: a Function without a runtime runs its own server's image") {
		t.Errorf("Load of a Function with its own server and no image: %v, want spec.image required", err)
	}

	broken := manifestDir(t, map[string]string{"hello/hello.go": goSource, "hello.yaml": goManifest,
		"broken/broken.go": brokenGo, "broken.yaml": brokenBuild})
	fns, err := Load(broken, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), fns, Options{Registry: host + "/fns", Builder: builder(t), Client: c})
	if err == nil || !strings.Contains(err.Error(), "function default/broken") || !strings.Contains(err.Error(), "broken.go:3") ||
		!strings.Contains(err.Error(), "nothing applied") {
		t.Errorf("a failed build: %v, want the function, the compile error and nothing applied", err)
	}

	noNamespace := manifestDir(t, map[string]string{"hello/hello.go": goSource, "hello.yaml": goManifest, "prebuilt.yaml": imageOnly})
	fns, err = Load(noNamespace, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), fns, Options{Registry: host + "/fns", Builder: builder(t), Client: c})
	if err == nil || !strings.Contains(err.Error(), "function team/prebuilt") || !strings.Contains(err.Error(), `namespaces "team" not found`) {
		t.Errorf("a Function in a namespace that does not exist: %v, want the function and the cause", err)
	}

	unreachable := manifestDir(t, map[string]string{"hello/hello.go": goSource, "hello.yaml": goManifest, "prebuilt.yaml": imageOnly})
	fns, err = Load(unreachable, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), fns, Options{Registry: "127.0.0.1:1/fns", Builder: builder(t), Client: c})
	if err == nil || !strings.Contains(err.Error(), "function default/hello") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("an unreachable registry: %v, want the function and the registry", err)
	}
	if got := functions(t, c); len(got) != 0 {
		t.Errorf("Functions on the cluster after failed deploys: %v", got)
	}
	if n := pushes.Load(); n != 1 {
		t.Errorf("%d images pushed, want the one built before the failures were known (the same source, from two directories, is one image)", n)
	}
}
