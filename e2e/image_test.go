//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The sless the cluster runs is what its source gives: `make images` run
// again into an empty output (the binary linked anew, not left as it was
// because it looked current, and the image assembled anew) yields the very
// digest the activator's pods run. An image that moved with each build
// would be pulled anew by every node for nothing, and could never be
// checked against its source.
func TestSlessImageIsReproducible(t *testing.T) {
	var d appsv1.Deployment
	if err := cluster.c.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: "sless-activator"}, &d); err != nil {
		t.Fatal(err)
	}
	_, running, ok := strings.Cut(d.Spec.Template.Spec.Containers[0].Image, "@")
	if !ok {
		t.Fatalf("the activator runs %s, not an image by digest (make deploy installs by digest)", d.Spec.Template.Spec.Containers[0].Image)
	}
	version := tagOf(t, filepath.Join(root, "bin/images/sless"), running)
	if version == "" {
		t.Fatalf("no image %s in bin/images/sless: make deploy pushed another build than make images wrote", running)
	}

	out := t.TempDir()
	cmd := exec.Command("make", "-C", root, "images", "VERSION="+version, "IMAGES_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images VERSION=%s IMAGES_OUT=%s: %v\n%s", version, out, err, b)
	}
	if again := digestOf(t, filepath.Join(out, "images/sless"), version); again != running {
		t.Errorf("make images again, into an empty output: sless:%s is %s, the cluster runs %s", version, again, running)
	}
}

// tagOf is the tag other than latest under which the layout in dir holds
// the image digest.
func tagOf(t *testing.T, dir, digest string) string {
	t.Helper()
	for tag, d := range layoutTags(t, dir) {
		if d == digest && tag != "latest" {
			return tag
		}
	}
	return ""
}

func digestOf(t *testing.T, dir, tag string) string {
	t.Helper()
	return layoutTags(t, dir)[tag]
}

// layoutTags maps each tag of the OCI layout in dir to its digest.
func layoutTags(t *testing.T, dir string) map[string]string {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, desc := range m.Manifests {
		tags[desc.Annotations["org.opencontainers.image.ref.name"]] = desc.Digest.String()
	}
	return tags
}

// An archive sless build writes loads into containerd (the path to a k3s
// or kind node without a registry) under the name it was given, and
// under the one sless build chose when it was given none.
func TestArchiveImportsIntoContainerd(t *testing.T) {
	if _, err := os.Stat(containerd); err != nil {
		t.Fatalf("the cluster's containerd: %v (SLESS_E2E_CONTAINERD)", err)
	}
	const ns = "sless-e2e-archives" // a containerd namespace of the test's own
	src := filepath.Join(root, "config/samples/functions/hello-go")
	named := filepath.Join(t.TempDir(), "named.tar")
	sless(t, "build", src, "--runtime", "go", "--handler", "Handle", "-o", named, "-t", "sless.test/e2e/hello:v1")
	chosen := filepath.Join(t.TempDir(), "chosen.tar")
	out := sless(t, "build", src, "--runtime", "go", "--handler", "Handle", "-o", chosen)
	_, ref, ok := strings.Cut(strings.TrimSpace(out), "\t")
	if !ok {
		t.Fatalf("sless build printed %q, want the archive and its image's name", out)
	}
	ctr := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("ctr", append([]string{"--address", containerd, "-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	for _, want := range []struct{ archive, name string }{{named, "sless.test/e2e/hello:v1"}, {chosen, ref}} {
		ctr("images", "import", want.archive)
		t.Cleanup(func() {
			_, _ = exec.Command("ctr", "--address", containerd, "-n", ns, "images", "rm", want.name).CombinedOutput()
		})
		if names := strings.Fields(ctr("images", "ls", "-q")); !slices.Contains(names, want.name) {
			t.Errorf("containerd holds %q after importing %s, want %s", names, want.archive, want.name)
		}
	}
}
