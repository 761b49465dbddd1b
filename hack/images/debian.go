package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sless.dev/sless/ociimage"
)

// debPackage is one .deb as apt names it.
type debPackage struct {
	// file is its file name, name_version_arch.deb (the version's ":"
	// as "%3a").
	file string
}

// spec is the package as apt-get download takes it: name=version.
func (d debPackage) spec() (string, error) {
	parts := strings.Split(strings.TrimSuffix(d.file, ".deb"), "_")
	if len(parts) != 3 {
		return "", fmt.Errorf("package file %q is not name_version_arch.deb", d.file)
	}
	version, err := url.PathUnescape(parts[1])
	if err != nil {
		return "", fmt.Errorf("package file %q: %w", d.file, err)
	}
	return parts[0] + "=" + version, nil
}

// resolve asks apt for the packages and every dependency of theirs, as if
// nothing were installed: the closure a base image needs. A machine whose
// package lists are missing gets them first (apt-get update).
func resolve(ctx context.Context, packages []string) ([]debPackage, error) {
	args := append([]string{"install", "--print-uris", "-qq", "--no-install-recommends",
		"-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1"}, packages...)
	out, err := exec.CommandContext(ctx, "apt-get", args...).CombinedOutput()
	if err != nil && bytes.Contains(out, []byte("Unable to locate package")) {
		slog.Info("apt has no package lists: apt-get update")
		if upd, uerr := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return nil, fmt.Errorf("apt-get update: %w: %s", uerr, upd)
		}
		out, err = exec.CommandContext(ctx, "apt-get", args...).CombinedOutput()
	}
	if err != nil {
		return nil, fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, out)
	}
	var debs []debPackage
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// 'URI' file size [checksum]
		if f := strings.Fields(sc.Text()); len(f) >= 3 && strings.HasPrefix(f[0], "'") {
			debs = append(debs, debPackage{file: f[1]})
		}
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("apt resolved %s to no package:\n%s", strings.Join(packages, " "), out)
	}
	return debs, nil
}

// fetchPackages resolves packages and has apt download each .deb into
// cache once (apt checks them against its signed lists); it returns their
// files.
func fetchPackages(ctx context.Context, cache string, packages []string) ([]string, error) {
	debs, err := resolve(ctx, packages)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	var files, missing []string
	for _, d := range debs {
		file := filepath.Join(cache, d.file)
		files = append(files, file)
		if _, err := os.Stat(file); err == nil {
			continue
		}
		spec, err := d.spec()
		if err != nil {
			return nil, err
		}
		missing = append(missing, spec)
	}
	if len(missing) == 0 {
		return files, nil
	}
	slog.Info("downloading Debian packages", "count", len(missing))
	// Into a directory of its own, then by rename: a download cut short
	// never passes for a package.
	tmp, err := os.MkdirTemp(cache, ".download-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download", "-qq"}, missing...)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apt-get download: %w: %s", err, out)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(cache, e.Name())); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// addPackage adds the files of a .deb, as dpkg-deb reads them, to tree.
// Maintainer scripts do not run: the packages a runtime needs work
// without them.
func addPackage(ctx context.Context, tree *ociimage.Tree, deb string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	addErr := tree.AddTar(out)
	_, _ = io.Copy(io.Discard, out)
	if err := errors.Join(addErr, cmd.Wait()); err != nil {
		return fmt.Errorf("%s: %w %s", filepath.Base(deb), err, stderr.Bytes())
	}
	return nil
}
