// Command images builds sless's images without a container engine, for
// `make images`:
//
//	sless           the sless binary (every subcommand), static, non-root
//	runtime-python  Debian's Python 3.11: the base of Python functions
//	runtime-node    Debian's Node.js: the base of Node functions
//
// Go functions need no base of their own: `sless build` puts them on
// ociimage.Static, as the sless image is. With -binary, a static binary
// becomes an image of its own on that base (the test cluster's pause and
// CoreDNS images).
//
// Each image is written into an OCI layout directory under -out and, with
// -push, pushed to that registry. The Debian packages are resolved by apt
// from this machine's package lists and downloaded once, into -out/debs.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/fnimage"
	"sless.dev/sless/ociimage"
)

// baseSpec is a runtime base: the Debian packages it is made of (apt adds
// their dependencies) and its environment.
type baseSpec struct {
	packages []string
	env      []string
}

var bases = map[v1alpha1.Runtime]baseSpec{
	v1alpha1.RuntimePython: {
		packages: []string{"python3-minimal", "libpython3.11-stdlib"},
		env:      []string{"LANG=C.UTF-8"},
	},
	v1alpha1.RuntimeNode: {
		packages: []string{"nodejs"},
		env:      []string{"LANG=C.UTF-8"},
	},
}

type options struct {
	sless, version, out, push string
	only                      []string
	// binaries are images of one static binary each: name:tag → path.
	binaries map[string]string
}

func main() {
	o := options{binaries: map[string]string{}}
	var only string
	flag.StringVar(&o.sless, "sless", "bin/linux/sless", "the static Linux sless binary")
	flag.StringVar(&o.version, "version", "dev", "the sless image's tag (it is also tagged latest)")
	flag.StringVar(&o.out, "out", "bin/images", "directory of the OCI layouts and the downloaded packages")
	flag.StringVar(&o.push, "push", "", "registry to push the images to, such as 127.0.0.1:5000/sless (none: layouts only)")
	flag.StringVar(&only, "only", "", "comma-separated images to build (default all)")
	flag.Func("binary", "NAME:TAG=PATH: an image NAME:TAG of the static binary PATH (repeatable)", func(v string) error {
		ref, path, ok := strings.Cut(v, "=")
		if !ok || !strings.Contains(ref, ":") || path == "" {
			return fmt.Errorf("want NAME:TAG=PATH, not %q", v)
		}
		o.binaries[ref] = path
		return nil
	})
	flag.Parse()
	if only != "" {
		o.only = strings.Split(only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	builds := map[string]func(context.Context) (v1.Image, error){
		"sless": func(context.Context) (v1.Image, error) { return slessImage(o.sless, o.version) },
	}
	for rt, spec := range bases {
		builds[fnimage.BaseName(rt)] = func(ctx context.Context) (v1.Image, error) {
			return debianImage(ctx, filepath.Join(o.out, "debs"), spec)
		}
	}
	for ref, path := range o.binaries {
		name, _, _ := strings.Cut(ref, ":")
		builds[name] = func(context.Context) (v1.Image, error) { return binaryImage(path) }
	}
	names := o.only
	if names == nil {
		for name := range builds {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	for _, name := range names {
		build, ok := builds[name]
		if !ok {
			return fmt.Errorf("no image %q", name)
		}
		start := time.Now()
		img, err := build(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := ship(ctx, o, name, img); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		slog.Info("image built", "image", name, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// tags are an image's tags: the sless image's version and latest, a
// binary's own, a base's one tag.
func tags(o options, name string) []string {
	if name == "sless" {
		return []string{o.version, "latest"}
	}
	for ref := range o.binaries {
		if n, tag, _ := strings.Cut(ref, ":"); n == name {
			return []string{tag}
		}
	}
	return []string{fnimage.BaseTag}
}

// ship writes img into its layout and pushes it, by each of its tags.
func ship(ctx context.Context, o options, name string, img v1.Image) error {
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	for _, tag := range tags(o, name) {
		if err := ociimage.WriteLayout(filepath.Join(o.out, name), img, tag); err != nil {
			return err
		}
		if o.push == "" {
			continue
		}
		if _, err := ociimage.Push(ctx, img, strings.TrimSuffix(o.push, "/")+"/"+name+":"+tag); err != nil {
			return err
		}
	}
	slog.Info("image", "name", name, "digest", digest.String(), "layout", filepath.Join(o.out, name), "pushed", o.push != "")
	return nil
}

// slessImage is the sless binary on the static base, run as non-root with
// its subcommand as the arguments.
func slessImage(binary, version string) (v1.Image, error) {
	return staticImage(binary, "/usr/local/bin/sless", map[string]string{
		"org.opencontainers.image.title":   "sless",
		"org.opencontainers.image.version": version,
	})
}

// binaryImage is a static binary on the static base, its entrypoint.
func binaryImage(binary string) (v1.Image, error) {
	return staticImage(binary, "/"+filepath.Base(binary), nil)
}

func staticImage(binary, at string, labels map[string]string) (v1.Image, error) {
	var tree ociimage.Tree
	if err := tree.AddPath(binary, at, nil); err != nil {
		return nil, err
	}
	layer, err := tree.Layer()
	if err != nil {
		return nil, err
	}
	base, err := ociimage.Static()
	if err != nil {
		return nil, err
	}
	return ociimage.Build(base, ociimage.Config{Entrypoint: []string{at}, Labels: labels}, layer)
}

// debianImage is a base of Debian packages: the system files of
// ociimage.AddSystem and the packages' files, in one layer.
func debianImage(ctx context.Context, cache string, spec baseSpec) (v1.Image, error) {
	debs, err := fetchPackages(ctx, cache, spec.packages)
	if err != nil {
		return nil, err
	}
	var tree ociimage.Tree
	for _, deb := range debs {
		if err := addPackage(ctx, &tree, deb); err != nil {
			return nil, err
		}
	}
	if err := ociimage.AddSystem(&tree); err != nil {
		return nil, err
	}
	layer, err := tree.Layer()
	if err != nil {
		return nil, err
	}
	return ociimage.Build(ociimage.Empty(), ociimage.Config{
		User:       ociimage.NonRootUser,
		WorkingDir: "/",
		Env:        append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, spec.env...),
	}, layer)
}
