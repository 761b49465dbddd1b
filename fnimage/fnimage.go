// Package fnimage builds a function's OCI image from its source, without a
// container engine: what package runtimes prepares for an image (a static
// Go binary; a Python or Node source with its installed dependencies and
// the runtime script), in one layer on the runtime's base image.
package fnimage

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/ociimage"
	"sless.dev/sless/runtimes"
)

// DefaultBaseRegistry holds the runtime base images `make images` builds,
// by name BaseName(runtime).
const DefaultBaseRegistry = "ghcr.io/sless-dev"

// BaseName is the repository of a runtime's base image in a registry of
// bases. Go functions need none: they run on ociimage.Static.
func BaseName(rt v1alpha1.Runtime) string { return "runtime-" + string(rt) }

// BaseTag is the tag of the base images.
const BaseTag = "latest"

// Builder builds function images.
type Builder struct {
	// Runtimes are the options of runtimes.PrepareImage: the cache of
	// builds and installed dependencies, and where progress lines go.
	Runtimes runtimes.Options
	// BaseRegistry holds the base images of the script runtimes
	// (DefaultBaseRegistry when empty).
	BaseRegistry string
	// Bases name a runtime's base image instead: any image, in a
	// registry or an OCI layout directory. Go's default is
	// ociimage.Static, built here.
	Bases map[v1alpha1.Runtime]string
}

// Base is the base image of a runtime's functions.
func (b *Builder) Base(ctx context.Context, rt v1alpha1.Runtime) (v1.Image, error) {
	ref, ok := b.Bases[rt]
	switch {
	case ok:
	case rt == v1alpha1.RuntimeGo:
		return ociimage.Static()
	default:
		registry := b.BaseRegistry
		if registry == "" {
			registry = DefaultBaseRegistry
		}
		ref = strings.TrimSuffix(registry, "/") + "/" + BaseName(rt) + ":" + BaseTag
	}
	img, err := ociimage.Read(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("base image of %s functions: %w (make images writes the bases; --base %s=IMAGE or --base-registry names another)", rt, err, rt)
	}
	return img, nil
}

// Build prepares src for an image and puts it on its runtime's base.
func (b *Builder) Build(ctx context.Context, src runtimes.Source) (v1.Image, error) {
	content, err := runtimes.PrepareImage(ctx, src, b.Runtimes)
	if err != nil {
		return nil, err
	}
	base, err := b.Base(ctx, src.Runtime)
	if err != nil {
		return nil, err
	}
	// The function's files belong to root and are read-only to the
	// non-root user it runs as: a function cannot rewrite its own code.
	var tree ociimage.Tree
	for _, p := range content.Paths {
		var leaveOut func(string, fs.DirEntry) bool
		if p.To == runtimes.ImageSourceDir {
			leaveOut = skip
		}
		if err := tree.AddPath(p.From, p.To, leaveOut); err != nil {
			return nil, fmt.Errorf("function %s/%s: %w", src.Namespace, src.Name, err)
		}
	}
	layer, err := tree.Layer()
	if err != nil {
		return nil, fmt.Errorf("function %s/%s: %w", src.Namespace, src.Name, err)
	}
	return ociimage.Build(base, ociimage.Config{
		Entrypoint: content.Entrypoint,
		Env:        content.Env,
		User:       ociimage.NonRootUser,
		WorkingDir: content.WorkingDir,
		Labels: map[string]string{
			"dev.sless.function": src.Namespace + "/" + src.Name,
			"dev.sless.runtime":  string(src.Runtime),
		},
	}, layer)
}

// skip leaves out of a function's source in its image what is not
// source: version control, caches, and dependencies installed beside it
// (the image has its own, installed for it).
func skip(rel string, d fs.DirEntry) bool {
	return d.IsDir() && manifests.SkipDir(d.Name())
}
