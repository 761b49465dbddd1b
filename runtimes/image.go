package runtimes

import (
	"context"
	"path"
	"path/filepath"

	"sless.dev/sless/apis/v1alpha1"
)

// Where a function's files go in its image. The source keeps the layout
// it has on disk, and is the working directory, as under sless dev.
const (
	ImageSourceDir  = "/function"
	imageRuntimeDir = "/opt/sless"
)

// imageInterpreter is the command of each script runtime's base image.
var imageInterpreter = map[v1alpha1.Runtime]string{v1alpha1.RuntimePython: "python3", v1alpha1.RuntimeNode: "node"}

// Image is a function prepared for an image on its runtime's base: what it
// adds from this machine, and how the image starts it.
type Image struct {
	// Paths are files and directories of this machine and where they go.
	Paths []ImagePath
	// Entrypoint, Env and WorkingDir are the image's configuration. The
	// platform adds PORT and SLESS_HANDLER when it runs it.
	Entrypoint []string
	Env        []string
	WorkingDir string
}

// ImagePath is a file or directory From this machine, placed at To.
type ImagePath struct{ From, To string }

// PrepareImage prepares src as Prepare does, for an image: a Go function
// is built as a static Linux binary; a Python or Node function's
// dependencies are installed here, by this machine's pip or npm, for the
// interpreter of the runtime's base (the same minor version: see
// docs/kubernetes.md).
//
// A Python or Node handler is loaded here first (checkLoads), so that one
// that cannot load fails the build as it would fail every start.
func PrepareImage(ctx context.Context, src Source, opts Options) (Image, error) {
	p, err := prepare(ctx, src, opts, true)
	if err != nil {
		return Image{}, err
	}
	if p.script != "" {
		if err := checkLoads(ctx, p); err != nil {
			return Image{}, err
		}
	}
	return p.image(), nil
}

// image places the prepared function in an image.
func (p prepared) image() Image {
	img := Image{Paths: []ImagePath{{From: p.src.Dir, To: ImageSourceDir}}, WorkingDir: ImageSourceDir}
	if p.script == "" {
		bin := path.Join("/usr/local/bin", filepath.Base(p.command))
		img.Paths = append(img.Paths, ImagePath{From: p.command, To: bin})
		img.Entrypoint = []string{bin}
		return img
	}
	script := path.Join(imageRuntimeDir, filepath.Base(p.script))
	img.Paths = append(img.Paths, ImagePath{From: p.script, To: script})
	img.Entrypoint = []string{imageInterpreter[p.src.Runtime], script}
	img.Env = append(scriptEnv(ImageSourceDir, p.handler), p.env...)
	if p.deps != "" {
		deps := path.Join(imageRuntimeDir, "deps")
		img.Paths = append(img.Paths, ImagePath{From: p.deps, To: deps})
		img.Env = append(img.Env, p.depsVar+"="+deps)
	}
	return img
}
