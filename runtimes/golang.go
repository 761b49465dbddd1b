package runtimes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/token"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	gosdk "sless.dev/sless/runtimes/go"
)

// goBuildEnv are the variables that change what go build makes of the
// same source; a build under other values is another cache entry.
var goBuildEnv = []string{"GOOS", "GOARCH", "GOFLAGS", "CGO_ENABLED", "GOEXPERIMENT", "GOAMD64", "GOARM64", "GOTOOLCHAIN"}

const (
	// goSDKDir is where the SDK's module (gosdk.Files) is written in the
	// SDK's directory: where it is in this repository, below a go.mod of
	// goLegacyModule.
	goSDKDir = "runtimes/go"
	// goLegacyModule is the module the SDK was part of before it had one
	// of its own: a function module written then requires it (replaced by
	// a checkout, as the samples did). The build replaces it by a module
	// without packages, so that such a function still builds, with the
	// SDK from its own module.
	goLegacyModule = "sless.dev/sless"
)

// prepareGo builds src into a server binary, or finds it already built.
// The binary lives under opts.CacheDir/go/<hash of everything the build
// reads>, so an unchanged function starts without running go at all.
// forImage builds a static Linux binary, for an image.
func prepareGo(ctx context.Context, src Source, opts Options, forImage bool) (prepared, error) {
	fail := func(err error) (prepared, error) {
		return prepared{}, fmt.Errorf("go function %s/%s: %w", src.Namespace, src.Name, err)
	}
	if !token.IsIdentifier(src.Handler) || !token.IsExported(src.Handler) {
		return fail(fmt.Errorf("handler %q is not an exported Go function name, such as Handle", src.Handler))
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fail(fmt.Errorf("building Go functions needs the go command: %w", err))
	}
	// The generated go.mod replaces modules by absolute directories.
	cacheDir, err := filepath.Abs(filepath.Join(opts.CacheDir, "go"))
	if err != nil {
		return fail(fmt.Errorf("cache directory: %w", err))
	}
	var env []string
	if forImage {
		env = goImageEnv
	}
	key, err := goBuildKey(src, goTool, env)
	if err != nil {
		return fail(err)
	}
	entry := filepath.Join(cacheDir, key)
	bin := filepath.Join(entry, goBinaryName(src.Name))
	built := prepared{src: src, handler: src.Handler, command: bin}
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		now := time.Now()
		_ = os.Chtimes(entry, now, now) // used: the last to be pruned
		return built, nil
	}
	fmt.Fprintf(opts.Progress, "go %s/%s: building\n", src.Namespace, src.Name)
	start := time.Now()
	b := goBuild{goTool: goTool, src: src, dir: cacheDir, env: env}
	if err := b.run(ctx, entry, bin); err != nil {
		return fail(err)
	}
	fmt.Fprintf(opts.Progress, "go %s/%s: built in %s\n", src.Namespace, src.Name, time.Since(start).Round(100*time.Millisecond))
	if err := pruneGoBuilds(cacheDir, src); err != nil {
		fmt.Fprintf(opts.Progress, "go %s/%s: pruning older builds: %v\n", src.Namespace, src.Name, err)
	}
	return built, nil
}

// goImageEnv builds a binary for an image: static (no libc to find in a
// minimal base), for Linux on this machine's architecture.
var goImageEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH}

// goKeptBuilds is how many builds of one function the cache keeps: the
// newest and the ones used just before, so that undoing an edit starts
// at once. Each build is a binary of several megabytes, one per edit.
const goKeptBuilds = 3

// goOwnerFile, in a build's entry, names the function it is a build of.
const goOwnerFile = "function"

func goOwner(src Source) string { return src.Namespace + "/" + src.Name }

// pruneGoBuilds removes all but the goKeptBuilds most recently built or
// used builds of src's function. An instance still running a removed
// binary is not disturbed: its file lives on until the process exits.
func pruneGoBuilds(cacheDir string, src Source) error {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return err
	}
	type build struct {
		path string
		used time.Time
	}
	var builds []build
	for _, e := range entries {
		p := filepath.Join(cacheDir, e.Name())
		owner, err := os.ReadFile(filepath.Join(p, goOwnerFile))
		if err != nil || string(owner) != goOwner(src) {
			continue // not a build of this function (or the sless package)
		}
		if fi, err := os.Stat(p); err == nil {
			builds = append(builds, build{p, fi.ModTime()})
		}
	}
	if len(builds) <= goKeptBuilds {
		return nil
	}
	slices.SortFunc(builds, func(a, b build) int { return b.used.Compare(a.used) })
	var errs []error
	for _, b := range builds[goKeptBuilds:] {
		errs = append(errs, os.RemoveAll(b.path))
	}
	return errors.Join(errs...)
}

// goBinaryName names the binary after the function, so that process
// listings say which function an instance serves.
func goBinaryName(name string) string {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "function"
	}
	return name
}

// goBuildKey hashes what decides the binary: the function's files, its
// handler and name, the go command, the generated files and the sless
// package.
func goBuildKey(src Source, goTool string, env []string) (string, error) {
	h := sha256.New()
	resolved, err := filepath.EvalSymlinks(goTool)
	if err != nil {
		return "", fmt.Errorf("resolve the go command: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("resolve the go command: %w", err)
	}
	fmt.Fprintf(h, "go %s %d %d\x00", resolved, fi.Size(), fi.ModTime().UnixNano())
	for _, name := range goBuildEnv {
		fmt.Fprintf(h, "%s=%s\x00", name, goGetenv(env, name))
	}
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%v\x00%v\x00%v\x00", src.Name, src.Handler, goMainTemplate, goModTemplate,
		goSlessForm, goHTTPFuncForm, goHTTPValueForm)
	if err := goHashSDK(h); err != nil {
		return "", err
	}
	if err := goHashTree(h, src.Dir); err != nil {
		return "", fmt.Errorf("read source: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// goGetenv is name's value in env, the build's own settings, or else in
// this process's environment, which the go command also reads.
func goGetenv(env []string, name string) string {
	for _, kv := range slices.Backward(env) {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return os.Getenv(name)
}

// goHashTree feeds every regular file under dir, by relative path, into h.
// Hidden files and directories are left out: version control and editor
// state does not change a build.
func goHashTree(h hash.Hash, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return goHashFile(h, filepath.ToSlash(rel), p)
	})
}

func goHashFile(h hash.Hash, name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s %d\x00", name, fi.Size())
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	return nil
}

// goFile is a file to write, by slash-separated relative path.
type goFile struct {
	name string
	data []byte
}

// goSDK returns the files of the SDK's directory: the SDK's module under
// goSDKDir, tests left out, and a go.mod of goLegacyModule above it.
func goSDK() ([]goFile, error) {
	files := []goFile{{"go.mod", fmt.Appendf(nil, "module %s\n\ngo 1.24\n", goLegacyModule)}}
	err := fs.WalkDir(gosdk.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		data, err := gosdk.Files.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, goFile{path.Join(goSDKDir, p), data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded sless package: %w", err)
	}
	return files, nil
}

// goSDKModule is the SDK's module path, read from its go.mod so that it
// is written in one place.
func goSDKModule() (string, error) {
	data, err := gosdk.Files.ReadFile("go.mod")
	if err != nil {
		return "", fmt.Errorf("embedded sless package: %w", err)
	}
	module := goModulePath(data)
	if module == "" {
		return "", errors.New("embedded sless package: go.mod has no module line")
	}
	return module, nil
}

func goHashSDK(h hash.Hash) error {
	files, err := goSDK()
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintf(h, "sdk %s %d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	return nil
}

// writeGoSDK writes the SDK's directory (goSDK) under dir, once per
// version of the SDK, and returns it.
func writeGoSDK(dir string) (string, error) {
	h := sha256.New()
	if err := goHashSDK(h); err != nil {
		return "", err
	}
	final := filepath.Join(dir, "sdk-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(final, "go.mod")); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("write sless package: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := fillGoSDK(tmp); err != nil {
		return "", fmt.Errorf("write sless package: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build wrote it in the meantime.
		if _, statErr := os.Stat(filepath.Join(final, "go.mod")); statErr == nil {
			return final, nil
		}
		return "", fmt.Errorf("write sless package: %w", err)
	}
	return final, nil
}

func fillGoSDK(dir string) error {
	files, err := goSDK()
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
