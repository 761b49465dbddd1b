package runtimes

// What the Python and Node runtimes share: their runtime script lives in the
// sless binary and is written into the cache; dependencies are installed once
// per content hash into a directory that appears whole or not at all.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sless.dev/sless/apis/v1alpha1"
)

// scriptOutputTail bounds how much of an installer's output an error quotes.
const scriptOutputTail = 4 << 10

// scriptCheck checks what both script runtimes need before anything runs:
// the source directory, an absolute cache directory (paths into it end up
// in a process started elsewhere) and a module.function handler, which it
// returns with its module (src.Handler, or the runtime's default).
func scriptCheck(src Source, opts *Options) (handler, module string, err error) {
	if info, err := os.Stat(src.Dir); err != nil {
		return "", "", fmt.Errorf("source directory of %s/%s: %w", src.Namespace, src.Name, err)
	} else if !info.IsDir() {
		return "", "", fmt.Errorf("source directory of %s/%s: %s is not a directory", src.Namespace, src.Name, src.Dir)
	}
	if opts.CacheDir == "" {
		return "", "", fmt.Errorf("%s runtime: no cache directory", src.Runtime)
	}
	if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
		return "", "", fmt.Errorf("%s runtime: cache directory: %w", src.Runtime, err)
	}
	handler = src.Handler
	if handler == "" {
		handler = (&v1alpha1.FunctionSpec{Runtime: src.Runtime}).EffectiveHandler()
	}
	i := strings.LastIndex(handler, ".")
	if i <= 0 || i == len(handler)-1 {
		return "", "", fmt.Errorf("handler %q of %s/%s: want module.function", handler, src.Namespace, src.Name)
	}
	return handler, handler[:i], nil
}

// scriptExists reports whether one of names (relative to dir) exists: the
// files a handler module may be loaded from.
func scriptExists(dir string, names ...string) bool {
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// scriptInterpreter finds an interpreter on PATH.
func scriptInterpreter(name, runtime string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s runtime needs %s on PATH: %w", runtime, name, err)
	}
	return path, nil
}

// scriptEnv is the environment the runtime scripts read (besides PORT):
// the source directory and the handler.
func scriptEnv(dir, handler string) []string {
	return []string{"SLESS_SOURCE=" + dir, "SLESS_HANDLER=" + handler}
}

// scriptWrite writes content as cacheDir/scripts/<hash>/name, once: the
// path changes with the content, and a rename makes the file appear whole.
func scriptWrite(cacheDir, name string, content []byte) (string, error) {
	dir := filepath.Join(cacheDir, "scripts", scriptHash(content)[:16])
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("runtime script %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return "", fmt.Errorf("runtime script %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.Write(content)
	if err = errors.Join(err, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return "", fmt.Errorf("runtime script %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("runtime script %s: %w", name, err)
	}
	return path, nil
}

// scriptHash is the hex SHA-256 of parts, each length-prefixed so that
// moving bytes between parts changes the hash.
func scriptHash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// InstallError is a failure of a function's package manager (npm, pip) to
// install its dependencies. The registry may be unreachable for a while,
// so unlike a compile error it is worth retrying with the same source.
type InstallError struct{ Err error }

func (e *InstallError) Error() string { return e.Err.Error() }
func (e *InstallError) Unwrap() error { return e.Err }

// scriptInstall makes dest (what, for progress lines) once: install runs
// on an empty directory that is then renamed to dest, so an interrupted or
// failed install is never taken for a cached one.
func scriptInstall(src Source, opts Options, what, dest string, install func(tmp string) error) error {
	if _, err := os.Stat(dest); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // only left when the rename did not happen
	start := time.Now()
	fmt.Fprintf(opts.Progress, "%s %s/%s: installing %s\n", src.Runtime, src.Namespace, src.Name, what)
	if err := install(tmp); err != nil {
		return &InstallError{Err: err}
	}
	if err := os.Rename(tmp, dest); err != nil {
		if _, statErr := os.Stat(dest); statErr != nil {
			return err
		} // else a concurrent prepare installed the same set first
	}
	fmt.Fprintf(opts.Progress, "%s %s/%s: installed %s in %s\n", src.Runtime, src.Namespace, src.Name, what, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// scriptRun runs an installer and, when it fails, returns an error quoting
// the end of its output, where installers put the reason.
func scriptRun(cmd *exec.Cmd) error {
	var out scriptTail
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w:\n%s", err, out.String())
	}
	return nil
}

// scriptTail keeps the last scriptOutputTail bytes written to it.
type scriptTail struct {
	buf []byte
	cut bool // the start was dropped
}

func (t *scriptTail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - scriptOutputTail; over > 0 {
		t.cut = true
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the kept output from its first whole line on.
func (t *scriptTail) String() string {
	s := string(t.buf)
	if t.cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
