package runtimes

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// pythonRuntimeScript serves a Python handler; it is embedded so the sless
// binary alone can run Python functions.
//
//go:embed python/sless_runtime.py
var pythonRuntimeScript []byte

// preparePython checks the handler's module file exists, installs
// requirements.txt when the source has one, and returns python3 running
// the runtime script.
func preparePython(ctx context.Context, src Source, opts Options) (prepared, error) {
	handler, module, err := scriptCheck(src, &opts)
	if err != nil {
		return prepared{}, err
	}
	file := filepath.Join(strings.Split(module, ".")...)
	if !scriptExists(src.Dir, file+".py", filepath.Join(file, "__init__.py")) {
		return prepared{}, fmt.Errorf("python handler %s of %s/%s: no %s.py in %s", handler, src.Namespace, src.Name, file, src.Dir)
	}
	python, version, err := pythonResolve(ctx)
	if err != nil {
		return prepared{}, err
	}
	script, err := scriptWrite(opts.CacheDir, "sless_runtime.py", pythonRuntimeScript)
	if err != nil {
		return prepared{}, err
	}
	deps, err := pythonRequirements(ctx, src, opts, python, version)
	if err != nil {
		return prepared{}, err
	}
	return prepared{src: src, handler: handler, command: python, script: script, deps: deps, depsVar: "PYTHONPATH",
		env: []string{
			"PYTHONUNBUFFERED=1", // print() reaches the logs when it happens
			// No bytecode written into the user's source directory. (A
			// PYTHONPYCACHEPREFIX would move the standard library's
			// bytecode too, and made every start about 370 ms slower here.)
			"PYTHONDONTWRITEBYTECODE=1",
		}}, nil
}

// pythonRequirements installs the source's requirements.txt with pip into
// a directory keyed by its content and the Python version, and returns
// that directory ("" without requirements.txt).
func pythonRequirements(ctx context.Context, src Source, opts Options, python string, version []byte) (string, error) {
	path := filepath.Join(src.Dir, "requirements.txt")
	requirements, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("python %s/%s: %w", src.Namespace, src.Name, err)
	}
	dest := filepath.Join(opts.CacheDir, "python", scriptHash(version, requirements))
	err = scriptInstall(src, opts, "requirements.txt", dest, func(tmp string) error {
		cmd := exec.CommandContext(ctx, python, "-m", "pip", "install",
			"--disable-pip-version-check", "--no-input", "--target", tmp, "-r", path)
		cmd.Dir = src.Dir // relative paths in requirements.txt are the user's
		return scriptRun(cmd)
	})
	if err != nil {
		return "", fmt.Errorf("python %s/%s: pip install -r %s: %w", src.Namespace, src.Name, path, err)
	}
	return dest, nil
}

// pythonResolve finds python3 on PATH and asks it for the interpreter it
// really is and its version. Version managers such as pyenv put a shell
// script on PATH that takes a second or more to start; running the
// interpreter it resolves to keeps that out of every cold start.
func pythonResolve(ctx context.Context) (exe string, version []byte, err error) {
	python, err := scriptInterpreter("python3", "python")
	if err != nil {
		return "", nil, err
	}
	out, err := exec.CommandContext(ctx, python, "-c", "import sys; print(sys.executable); print(sys.version)").Output()
	if err != nil {
		return "", nil, fmt.Errorf("python runtime: asking %s for its interpreter: %w", python, err)
	}
	exe, v, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if !filepath.IsAbs(exe) {
		return "", nil, fmt.Errorf("python runtime: %s names no interpreter (sys.executable %q)", python, exe)
	}
	return exe, []byte(v), nil
}
