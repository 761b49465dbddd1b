// Package runtimes turns a function's source into a process that serves it
// by the runtime contract: listen on 127.0.0.1:$PORT, answer GET /healthz
// once the handler is loaded, and turn every other request into one
// handler call; or runs a Function's own server, which keeps the first two
// points. The local platform prepares a function once (build, install
// dependencies) and starts the resulting Process once per instance.
package runtimes

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"sless.dev/sless/apis/v1alpha1"
)

// Source is what a runtime needs to know of a function.
type Source struct {
	Namespace, Name string
	Runtime         v1alpha1.Runtime
	// Dir is the absolute directory of the handler's code.
	Dir string
	// Handler is the entry point: an exported Go function name, or
	// module.function for Python and Node.
	Handler string
	// Command starts a Function without a runtime, its own server, in
	// Dir.
	Command []string
	// Env are the Function's variables (NAME=value), which a module may
	// read as it loads: an image's build loads the handler with them.
	Env []string
}

// Process is how to start one instance of a prepared function. The
// supervisor adds PORT (and the Function's env) to Env before starting it,
// and expands their $(NAME)s in Args (Expand).
type Process struct {
	Path string
	Args []string
	Dir  string
	Env  []string
}

// Options are shared by every runtime.
type Options struct {
	// CacheDir holds builds, installed dependencies and the runtimes' own
	// files, keyed by a hash of what they were made from, so a second
	// start of an unchanged function prepares nothing.
	CacheDir string
	// Progress receives one line per long step (a build, an install), so a
	// user watching sless dev sees why a first start takes time.
	Progress io.Writer
}

// Prepare builds or installs what src needs and returns how to start it.
// Errors name the cause the user must fix (a compile error with file:line,
// a missing handler, a failed install).
func Prepare(ctx context.Context, src Source, opts Options) (Process, error) {
	p, err := prepare(ctx, src, opts, false)
	if err != nil {
		return Process{}, err
	}
	return p.process(), nil
}

// prepare is Prepare for this machine or, forImage, for a Linux image of
// the runtime's base.
func prepare(ctx context.Context, src Source, opts Options, forImage bool) (prepared, error) {
	if !filepath.IsAbs(src.Dir) {
		return prepared{}, fmt.Errorf("source of %s/%s: %q is not an absolute directory", src.Namespace, src.Name, src.Dir)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	switch src.Runtime {
	case v1alpha1.RuntimeGo:
		return prepareGo(ctx, src, opts, forImage)
	case v1alpha1.RuntimePython:
		return preparePython(ctx, src, opts)
	case v1alpha1.RuntimeNode:
		return prepareNode(ctx, src, opts)
	case "":
		if forImage {
			return prepared{}, fmt.Errorf("function %s/%s: %w", src.Namespace, src.Name, errServerImage)
		}
		return prepareServer(src)
	}
	return prepared{}, fmt.Errorf("function %s/%s: unknown runtime %q", src.Namespace, src.Name, src.Runtime)
}

// prepared is a function made ready to run: built, or its runtime script
// written and its dependencies installed, in the cache.
type prepared struct {
	src     Source
	handler string
	// command is what runs: a Go function's binary, the interpreter on
	// this machine of a Python or Node function, or the program of a
	// function's own server, with args.
	command string
	args    []string
	// script is the runtime script the interpreter runs ("" for Go).
	script string
	// deps is the directory of installed dependencies, or "", and
	// depsVar the variable that points the interpreter at it.
	deps, depsVar string
	// env is the runtime's own settings.
	env []string
}

// process is how to start the function on this machine.
func (p prepared) process() Process {
	if p.script == "" {
		return Process{Path: p.command, Args: p.args, Dir: p.src.Dir}
	}
	env := append(scriptEnv(p.src.Dir, p.handler), p.env...)
	if p.deps != "" {
		env = append(env, p.depsVar+"="+p.deps)
	}
	return Process{Path: p.command, Args: []string{p.script}, Dir: p.src.Dir, Env: env}
}
