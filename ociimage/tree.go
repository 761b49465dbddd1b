// Package ociimage assembles OCI images without a container engine, with
// go-containerregistry (the library behind ko and crane): layers from files
// on this machine or from Debian packages, put on a base image, and shipped
// to a registry, an OCI layout directory or an OCI archive.
//
// Layers are reproducible: entries sorted, times fixed, owners numeric, so
// the same files give the same digest on every build.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every entry's modification time: a layer's digest depends on
// its content alone.
var epoch = time.Unix(0, 0).UTC()

// entry is one file, directory or link of a layer.
type entry struct {
	mode     fs.FileMode // type and permission bits
	uid, gid int
	data     []byte // a regular file's content
	src      string // or the file on this machine to read it from
	link     string // a symbolic link's target
}

// Tree is the content of one layer, built up by path. Parent directories
// are added as they are needed (0755, root), and a later Add of a path
// replaces an earlier one, as a later layer would.
type Tree struct {
	entries map[string]entry
	// UID and GID own what Add* add from now on.
	UID, GID int
}

// Name cleans name into a layer path: slash-separated, relative to the
// root, without "." or "..".
func Name(name string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(name)), "/")
	if clean == "" {
		return "", fmt.Errorf("%q names the root, not an entry", name)
	}
	return clean, nil
}

func (t *Tree) put(name string, e entry) error {
	clean, err := Name(name)
	if err != nil {
		return err
	}
	if t.entries == nil {
		t.entries = make(map[string]entry)
	}
	for dir := path.Dir(clean); dir != "."; dir = path.Dir(dir) {
		if existing, ok := t.entries[dir]; ok {
			if !existing.mode.IsDir() {
				return fmt.Errorf("%s: %s is not a directory", clean, dir)
			}
			continue
		}
		t.entries[dir] = entry{mode: fs.ModeDir | 0o755}
	}
	t.entries[clean] = e
	return nil
}

// permBits are the permission bits of m, with setuid, setgid and sticky.
func permBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// owned is e owned by the tree's UID and GID.
func (t *Tree) owned(e entry) entry {
	e.uid, e.gid = t.UID, t.GID
	return e
}

// AddFile adds a regular file with data.
func (t *Tree) AddFile(name string, perm fs.FileMode, data []byte) error {
	return t.put(name, t.owned(entry{mode: permBits(perm), data: data}))
}

// AddDir adds an empty directory (or sets the mode of one).
func (t *Tree) AddDir(name string, perm fs.FileMode) error {
	return t.put(name, t.owned(entry{mode: fs.ModeDir | permBits(perm)}))
}

// AddSymlink adds a symbolic link to target.
func (t *Tree) AddSymlink(name, target string) error {
	return t.put(name, t.owned(entry{mode: fs.ModeSymlink | 0o777, link: target}))
}

// Chown gives an entry already added to uid and gid.
func (t *Tree) Chown(name string, uid, gid int) error {
	clean, err := Name(name)
	if err != nil {
		return err
	}
	e, ok := t.entries[clean]
	if !ok {
		return fmt.Errorf("chown %s: no such entry", clean)
	}
	e.uid, e.gid = uid, gid
	t.entries[clean] = e
	return nil
}

// AddPath adds the file, link or directory tree at src under name. skip,
// when set, leaves out a directory (and all below it) or a file by its
// path relative to src. Files are read when the layer is made, not now.
// Anything but files, directories and symbolic links is an error: a
// device or socket has no place in an image built from sources.
func (t *Tree) AddPath(src, name string, skip func(rel string, d fs.DirEntry) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && skip != nil && skip(filepath.ToSlash(rel), d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		dest := path.Join(name, filepath.ToSlash(rel))
		switch mode := info.Mode(); {
		case mode.IsDir():
			return t.AddDir(dest, mode)
		case mode.IsRegular():
			return t.put(dest, t.owned(entry{mode: permBits(mode), src: p}))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return t.AddSymlink(dest, target)
		default:
			return fmt.Errorf("%s: %s is neither a file, a directory nor a link", p, mode.Type())
		}
	})
}

// AddTar adds every entry of a tar stream (a Debian package's data, say),
// keeping modes and owners. A hard link becomes a copy of its target.
func (t *Tree) AddTar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		if strings.Trim(path.Clean("/"+h.Name), "/") == "" {
			continue // the archive's own root, "./"
		}
		e := entry{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid}
		switch h.Typeflag {
		case tar.TypeDir:
			err = t.put(h.Name, e)
		case tar.TypeReg:
			if e.data, err = io.ReadAll(tr); err == nil {
				err = t.put(h.Name, e)
			}
		case tar.TypeSymlink:
			e.link = h.Linkname
			err = t.put(h.Name, e)
		case tar.TypeLink:
			err = t.copyOf(h.Name, h.Linkname)
		default:
			err = fmt.Errorf("%s: tar entry type %q is not supported", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func (t *Tree) copyOf(name, target string) error {
	clean, err := Name(target)
	if err != nil {
		return err
	}
	e, ok := t.entries[clean]
	if !ok || !e.mode.IsRegular() {
		return fmt.Errorf("%s: hard link to %s, which is not a file before it", name, target)
	}
	return t.put(name, e)
}

// Len is the number of entries, parent directories included.
func (t *Tree) Len() int { return len(t.entries) }

// Layer writes the tree as a layer, in path order. The tar is held in
// memory, compressed once, and read again for each push.
func (t *Tree) Layer() (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(t.entries))
	for name := range t.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := writeEntry(tw, name, t.entries[name]); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func writeEntry(tw *tar.Writer, name string, e entry) error {
	h := &tar.Header{Name: name, Mode: int64(e.mode.Perm()), Uid: e.uid, Gid: e.gid, ModTime: epoch}
	if e.mode&fs.ModeSetuid != 0 {
		h.Mode |= 0o4000
	}
	if e.mode&fs.ModeSetgid != 0 {
		h.Mode |= 0o2000
	}
	if e.mode&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	switch {
	case e.mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(h)
	case e.mode&fs.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		return tw.WriteHeader(h)
	}
	data := e.data
	if e.src != "" {
		var err error
		if data, err = os.ReadFile(e.src); err != nil {
			return err
		}
	}
	h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
