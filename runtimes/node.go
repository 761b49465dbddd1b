package runtimes

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// nodeRuntimeScript serves a Node handler; it is embedded so the sless
// binary alone can run Node functions.
//
//go:embed node/sless-runtime.js
var nodeRuntimeScript []byte

// prepareNode checks the handler's module exists, installs package.json's
// dependencies when the source has one, and returns node running the
// runtime script.
func prepareNode(ctx context.Context, src Source, opts Options) (prepared, error) {
	handler, module, err := scriptCheck(src, &opts)
	if err != nil {
		return prepared{}, err
	}
	file := filepath.FromSlash(module)
	if !scriptExists(src.Dir, file+".js", file) {
		return prepared{}, fmt.Errorf("node handler %s of %s/%s: no %s.js in %s", handler, src.Namespace, src.Name, file, src.Dir)
	}
	node, err := scriptInterpreter("node", "node")
	if err != nil {
		return prepared{}, err
	}
	script, err := scriptWrite(opts.CacheDir, "sless-runtime.js", nodeRuntimeScript)
	if err != nil {
		return prepared{}, err
	}
	modules, err := nodePackages(ctx, src, opts, node)
	if err != nil {
		return prepared{}, err
	}
	return prepared{src: src, handler: handler, command: node, script: script, deps: modules, depsVar: "NODE_PATH"}, nil
}

// nodePackages installs the dependencies of the source's package.json (and
// package-lock.json) with npm into a directory keyed by their content and
// the Node version, and returns its node_modules ("" without package.json),
// which require() searches through NODE_PATH: the source directory is left
// as the user wrote it.
func nodePackages(ctx context.Context, src Source, opts Options, node string) (string, error) {
	manifest, err := os.ReadFile(filepath.Join(src.Dir, "package.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("node %s/%s: %w", src.Namespace, src.Name, err)
	}
	lock, err := os.ReadFile(filepath.Join(src.Dir, "package-lock.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("node %s/%s: %w", src.Namespace, src.Name, err)
	}
	npm, err := scriptInterpreter("npm", "node")
	if err != nil {
		return "", err
	}
	version, err := nodeVersion(ctx, node)
	if err != nil {
		return "", fmt.Errorf("node %s/%s: %w", src.Namespace, src.Name, err)
	}
	dest := filepath.Join(opts.CacheDir, "node", scriptHash(version, manifest, lock))
	err = scriptInstall(src, opts, "package.json", dest, func(tmp string) error {
		if err := nodeCopyManifests(tmp, manifest, lock); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund")
		cmd.Dir = tmp
		return scriptRun(cmd)
	})
	if err != nil {
		return "", fmt.Errorf("node %s/%s: npm install of %s: %w", src.Namespace, src.Name, filepath.Join(src.Dir, "package.json"), err)
	}
	return filepath.Join(dest, "node_modules"), nil
}

// nodeCopyManifests writes package.json and, when there is one,
// package-lock.json into dir, where npm installs them.
func nodeCopyManifests(dir string, manifest, lock []byte) error {
	if err := os.WriteFile(filepath.Join(dir, "package.json"), manifest, 0o644); err != nil {
		return err
	}
	if lock == nil {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o644)
}

// nodeVersion is node's version, part of the dependency cache key because
// native addons are built for one Node ABI.
func nodeVersion(ctx context.Context, node string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", node, err)
	}
	return bytes.TrimSpace(out), nil
}
