package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"log"
)

// tarEntry is what a test checks of an entry of an image's filesystem.
type tarEntry struct {
	mode     fs.FileMode
	uid, gid int
	data     string
	link     string
	modTime  int64 // Unix seconds
}

// files flattens img's layers into its filesystem, by path.
func files(t *testing.T, img v1.Image) map[string]tarEntry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]tarEntry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimSuffix(h.Name, "/")] = tarEntry{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid,
			data: string(data), link: h.Linkname, modTime: h.ModTime.Unix()}
	}
}

// source writes a small tree: a script, a file, a link, a directory
// that skip leaves out.
func source(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, mode := range map[string]fs.FileMode{"run.sh": 0o755, "lib/data.txt": 0o600, ".git/HEAD": 0o644} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("lib/data.txt", filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func build(t *testing.T, dir string) v1.Image {
	t.Helper()
	var tree Tree
	tree.UID, tree.GID = 0, 0
	skip := func(rel string, d fs.DirEntry) bool { return d.Name() == ".git" }
	if err := tree.AddPath(dir, "/app", skip); err != nil {
		t.Fatal(err)
	}
	if err := tree.AddFile("etc/motd", 0o644, []byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	layer, err := tree.Layer()
	if err != nil {
		t.Fatal(err)
	}
	base, err := Static()
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(base, Config{Entrypoint: []string{"/app/run.sh"}, Env: []string{"A=1", "PATH=/app"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// A directory becomes a layer with its modes and links, owned as the
// tree says, at a fixed time; what skip names is left out; the base's
// system files are there; the config merges the environment.
func TestBuild(t *testing.T) {
	img := build(t, source(t))
	got := files(t, img)
	want := map[string]tarEntry{
		"app":              {mode: fs.ModeDir | 0o755},
		"app/run.sh":       {mode: 0o755, data: "run.sh"},
		"app/lib/data.txt": {mode: 0o600, data: "lib/data.txt"},
		"app/data":         {mode: fs.ModeSymlink | 0o777, link: "lib/data.txt"},
		"etc/motd":         {mode: 0o644, data: "hi\n"},
		"tmp":              {mode: fs.ModeDir | fs.ModeSticky | 0o777},
		"home/nonroot":     {mode: fs.ModeDir | 0o700, uid: NonRoot, gid: NonRoot},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || g != w {
			t.Errorf("%s = %+v (present %v), want %+v", name, g, ok, w)
		}
	}
	if _, ok := got["app/.git/HEAD"]; ok {
		t.Error("a skipped directory is in the image")
	}
	if !strings.Contains(got["etc/passwd"].data, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd:\n%s", got["etc/passwd"].data)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; c.User != NonRootUser || strings.Join(c.Env, " ") != "PATH=/app A=1" ||
		strings.Join(c.Entrypoint, " ") != "/app/run.sh" || cfg.OS != "linux" {
		t.Errorf("config %+v (os %s), want the entrypoint, PATH replaced, A added, user %s", c, cfg.OS, NonRootUser)
	}
}

// The same files give the same digest, whatever their times on disk;
// other content gives another.
func TestReproducible(t *testing.T) {
	dir := source(t)
	first, err := build(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "run.sh"), later, later); err != nil {
		t.Fatal(err)
	}
	again, err := build(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("digest %s after touching a file, was %s", again, first)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("changed"), 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := build(t, dir).Digest()
	if err != nil {
		t.Fatal(err)
	}
	if changed == first {
		t.Error("another content, the same digest")
	}
}

// An image survives a layout directory, an archive and a registry with
// its digest; a layout names its images by tag.
func TestShip(t *testing.T) {
	img := build(t, source(t))
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, img, "one"); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, Empty(), "two"); err != nil {
		t.Fatal(err)
	}
	back, err := Read(context.Background(), dir+":one")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := back.Digest(); got != want {
		t.Errorf("from the layout: %s, want %s", got, want)
	}
	if _, err := Read(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "holds 2 images") {
		t.Errorf("reading a layout of two images without a tag: %v, want an error naming the choice", err)
	}

	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteArchive(archive, img, "registry.test/fns/img:one"); err != nil {
		t.Fatal(err)
	}
	names := archiveNames(t, archive)
	if !names["oci-layout"] || !names["index.json"] || !names["blobs/sha256/"+want.Hex] {
		t.Errorf("archive holds %v, want an OCI layout with the image's manifest", names)
	}

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/test/img:v1"
	pushed, err := Push(context.Background(), img, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(pushed, "/test/img@"+want.String()) {
		t.Errorf("pushed as %s, want the repository by digest %s", pushed, want)
	}
	pulled, err := Read(context.Background(), pushed)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("pulled %s, want %s", got, want)
	}
}

func archiveNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
}

// A tar stream (a Debian package's data) keeps its modes, owners and
// links; a hard link becomes a copy; "./" prefixes go.
func TestAddTar(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, h := range []*tar.Header{
			{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./usr/bin/tool", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 4, Uid: 0, Gid: 50},
			{Name: "./usr/bin/alias", Typeflag: tar.TypeSymlink, Linkname: "tool"},
			{Name: "./usr/bin/copy", Typeflag: tar.TypeLink, Linkname: "./usr/bin/tool"},
		} {
			_ = tw.WriteHeader(h)
			if h.Size > 0 {
				_, _ = tw.Write([]byte("tool"))
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	var tree Tree
	if err := tree.AddTar(pr); err != nil {
		t.Fatal(err)
	}
	layer, err := tree.Layer()
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(Empty(), layer)
	if err != nil {
		t.Fatal(err)
	}
	got := files(t, img)
	tool := tarEntry{mode: fs.ModeSetuid | 0o755, gid: 50, data: "tool"}
	if got["usr/bin/tool"] != tool || got["usr/bin/copy"] != tool || got["usr/bin/alias"].link != "tool" {
		t.Errorf("entries %+v\nwant tool and copy %+v", got, tool)
	}
}
