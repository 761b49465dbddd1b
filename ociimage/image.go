package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image says about how to run it.
type Config struct {
	Entrypoint []string
	Cmd        []string
	// Env is added to the base's, replacing variables of the same name.
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
}

// Platform is the one images are built for: Linux on this machine's
// architecture (function images run on the cluster's nodes).
func Platform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// Empty is the image with nothing in it, an OCI one, for the platform.
func Empty() v1.Image {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON)
}

// Build puts layers on base and sets cfg over the base's configuration.
func Build(base v1.Image, cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("add layers: %w", err)
	}
	file, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	file = file.DeepCopy()
	p := Platform()
	file.OS, file.Architecture = p.OS, p.Architecture
	c := &file.Config
	if cfg.Entrypoint != nil {
		c.Entrypoint, c.Cmd = cfg.Entrypoint, nil
	}
	if cfg.Cmd != nil {
		c.Cmd = cfg.Cmd
	}
	c.Env = mergeEnv(c.Env, cfg.Env)
	if cfg.User != "" {
		c.User = cfg.User
	}
	if cfg.WorkingDir != "" {
		c.WorkingDir = cfg.WorkingDir
	}
	for k, v := range cfg.Labels {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[k] = v
	}
	img, err = mutate.ConfigFile(img, file)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// mergeEnv is base with each of add set, in place or appended.
func mergeEnv(base, add []string) []string {
	out := append([]string(nil), base...)
next:
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		for i, old := range out {
			if ok, _, _ := strings.Cut(old, "="); ok == k {
				out[i] = kv
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// Read opens an image: a directory holding an OCI layout (its image
// tagged ref's tag, or its only one), or a reference in a registry,
// pulled lazily with the credentials of the Docker config.
func Read(ctx context.Context, ref string) (v1.Image, error) {
	if dir, tag, ok := layoutPath(ref); ok {
		return readLayout(dir, tag)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(Platform()))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	return img, nil
}

// layoutPath tells a layout directory ("DIR" or "DIR:TAG") from a
// registry reference.
func layoutPath(ref string) (dir, tag string, ok bool) {
	if isLayout(ref) {
		return ref, "", true
	}
	if i := strings.LastIndex(ref, ":"); i > 0 && isLayout(ref[:i]) {
		return ref[:i], ref[i+1:], true
	}
	return "", "", false
}

func isLayout(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "index.json"))
	return err == nil
}

func readLayout(dir, tag string) (v1.Image, error) {
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	m, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	var found []v1.Hash
	for _, d := range m.Manifests {
		if tag == "" || d.Annotations[refNameAnnotation] == tag {
			found = append(found, d.Digest)
		}
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Errorf("image layout %s has no image tagged %q", dir, tag)
	case len(found) > 1:
		return nil, fmt.Errorf("image layout %s holds %d images: name one as %s:TAG", dir, len(found), dir)
	}
	return index.Image(found[0])
}

// containerdName is tag as containerd and the kubelet name it: Docker
// Hub's images as docker.io/library/....
func containerdName(tag name.Tag) string {
	if tag.RegistryStr() == name.DefaultRegistry {
		return "docker.io/" + tag.RepositoryStr() + ":" + tag.TagStr()
	}
	return tag.Name()
}

// refNameAnnotation tags an image in an OCI layout; containerd's names it
// whole when it imports the layout.
const (
	refNameAnnotation        = "org.opencontainers.image.ref.name"
	containerdNameAnnotation = "io.containerd.image.name"
)

// Push writes img to the registry as ref and returns the reference by
// digest, which names exactly what was pushed.
func Push(ctx context.Context, img v1.Image, ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return r.Context().Digest(digest.String()).String(), nil
}

// WriteLayout writes img into the OCI layout directory dir, tagged tag
// (replacing an image of that tag), creating the layout if need be.
func WriteLayout(dir string, img v1.Image, tag string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("image layout %s: %w", dir, err)
		}
	}
	annotations := layout.WithAnnotations(map[string]string{refNameAnnotation: tag})
	if err := p.ReplaceImage(img, func(d v1.Descriptor) bool { return d.Annotations[refNameAnnotation] == tag }, annotations); err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	return nil
}

// WriteArchive writes img as an OCI archive, a tar of an OCI layout,
// named ref (repository:tag): the layout's tag is ref's, and containerd's
// annotation holds the whole name, which `ctr images import` gives the
// image (skopeo's oci-archive:, kind load image-archive read the same).
func WriteArchive(file string, img v1.Image, ref string) (err error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-*")
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		refNameAnnotation: tag.TagStr(), containerdNameAnnotation: containerdName(tag),
	})); err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		return fmt.Errorf("image archive %s: %w", file, err)
	}
	return tw.Close()
}
