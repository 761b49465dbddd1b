//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/fnimage"
	"sless.dev/sless/internal/testfn"
	"sless.dev/sless/ociimage"
)

// A Function that brings its own server runs on the cluster from the
// manifest sless dev runs, its image added: the server-node sample, whose
// image is built here as a user's own tools would (the sample's files on
// a Node image, nothing of sless). It answers through both hops, told its
// route's prefix, and its WebSocket echo lasts across a scale-down from
// two instances to one, whichever of them goes.
func TestOwnServer(t *testing.T) {
	ns := namespace(t, "e2e-server")
	image := ownServerImage(t, ns, "server-node")
	sless(t, "deploy", "-n", ns, "-f", ownServerManifest(t, "server-node", "  image: "+image+"\n  scale: {min: 2, max: 2}\n"))
	waitFor(t, "two instances", func() bool { return readyPods(t, ns, "server-node") == 2 })

	a := mustInvokeKnown(t, ns, "server-node", "/")
	var got struct{ Server, Prefix string }
	if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.code != 200 || got.Server != "node" || got.Prefix != "/fn/"+ns+"/server-node" {
		t.Errorf("GET / = %d %q, %v; want 200 from node with its prefix", a.code, a.body, err)
	}
	if c := pods(t, ns, "server-node")[0].Spec.Containers[0]; strings.Join(c.Command, " ") != "node server.js" {
		t.Errorf("the function container's command is %q, want the manifest's", c.Command)
	}

	conn, _ := testfn.DialWebSocket(t, "ws"+strings.TrimPrefix(cluster.activator, "http")+"/fn/"+ns+"/server-node/ws")
	testfn.CheckEcho(t, conn)
	if out, err := kubectl(t, "patch", "function", "server-node", "-n", ns, "--type", "merge", "-p", `{"spec":{"scale":{"min":1,"max":1}}}`); err != nil {
		t.Fatalf("scale down: %v: %s", err, out)
	}
	waitFor(t, "one instance serving", func() bool { return len(podNames(t, ns, "server-node")) == 1 })
	testfn.CheckEcho(t, conn)
	testfn.CloseHandshake(t, conn)
}

// ownServerImage builds the image of a sample of config/samples/servers
// and pushes it for namespace ns: its files in /srv on the Node runtime's
// base (for its node), run as non-root, as a Dockerfile's COPY and USER
// would.
func ownServerImage(t *testing.T, ns, sample string) string {
	t.Helper()
	ctx := t.Context()
	base, err := ociimage.Read(ctx, bases+"/"+fnimage.BaseName(v1alpha1.RuntimeNode)+":"+fnimage.BaseTag)
	if err != nil {
		t.Fatal(err)
	}
	var tree ociimage.Tree
	if err := tree.AddPath(filepath.Join(root, "config/samples/servers", sample), "/srv", nil); err != nil {
		t.Fatal(err)
	}
	layer, err := tree.Layer()
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Build(base, ociimage.Config{User: ociimage.NonRootUser, WorkingDir: "/srv", Entrypoint: []string{"node", "server.js"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ociimage.Push(ctx, img, registry+"/"+ns+"/"+sample+":latest")
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// ownServerManifest is the manifest of a sample of config/samples/servers,
// as servers.yaml has it (its source made absolute), with extra spec
// lines.
func ownServerManifest(t *testing.T, name, extra string) string {
	t.Helper()
	dir := filepath.Join(root, "config/samples/servers")
	raw, err := os.ReadFile(filepath.Join(dir, "servers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		if !strings.Contains(doc, "\n  name: "+name+"\n") {
			continue
		}
		doc = strings.Replace(doc, "source: ./", "source: "+dir+"/", 1)
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(strings.TrimRight(doc, "\n")+"\n"+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	t.Fatalf("servers.yaml has no Function %s", name)
	return ""
}
