//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
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
