// Package manifests reads the Function manifests of a directory for the
// local platform, the same YAML users apply with kubectl, and tells when
// a manifest or a function's source changes.
package manifests

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"sless.dev/sless/apis/v1alpha1"
)

// Entry is a valid, defaulted Function read from a manifest.
type Entry struct {
	*v1alpha1.Function
	// File is the manifest it came from.
	File string
	// SourceDir is spec.source, made absolute against the manifest's
	// directory.
	SourceDir string
}

// Key is the function's namespace and name: its key wherever functions
// are mapped.
func (f Entry) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: f.Namespace, Name: f.Name}
}

// Built reports whether sless builds the function's image from its source:
// a runtime's function with a source is; a Function that brings its own
// server runs the image it names.
func (f Entry) Built() bool { return f.SourceDir != "" && f.Spec.Runtime != "" }

// FileError is a problem with one manifest file.
type FileError struct {
	File string
	// Function is the namespace/name of the function the problem is
	// about, when it is about one (an invalid spec, a duplicate); empty
	// when the file itself does not load.
	Function string
	Err      error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// LoadOptions configure Load.
type LoadOptions struct {
	// AllowExternalSources accepts a spec.source outside the manifests
	// directory. Off, such a manifest is refused, so that a directory of
	// manifests from elsewhere cannot make the platform build and serve
	// files it was not given, through "../", an absolute path or a symlink.
	AllowExternalSources bool
	// Kubernetes validates for a cluster (`sless deploy`) rather than
	// for the local platform: a Function needs an image or a source to
	// build one from, and its triggers' secrets are the cluster's.
	Kubernetes bool
	// Namespace is the namespace of the Functions whose manifest names
	// none (default "default"), as kubectl's --namespace.
	Namespace string
}

// Load reads every *.yaml and *.yml file directly in dir (sources live in
// subdirectories, which are not searched, so their own YAML files are
// never mistaken for manifests), or the one manifest file dir names. It
// returns the valid Functions, sorted by key, and one error per problem,
// naming the file and the field; a bad document or file does not keep the
// others from loading.
func Load(dir string, opts LoadOptions) ([]Entry, []error) {
	files, err := manifestFiles(dir)
	if err != nil {
		return nil, []error{err}
	}
	if len(files) == 1 && files[0] == dir {
		dir = filepath.Dir(dir)
	}
	srcs, err := newSources(dir, opts)
	if err != nil {
		return nil, []error{err}
	}
	var (
		fns  []Entry
		errs []error
		seen = map[types.NamespacedName]string{} // key → file
	)
	for _, file := range files {
		got, ferrs := loadFile(file, srcs)
		errs = append(errs, ferrs...)
		for _, fn := range got {
			if other, dup := seen[fn.Key()]; dup {
				errs = append(errs, &FileError{File: file, Function: fn.Key().String(), Err: fmt.Errorf("function %s is already defined in %s", fn.Key(), other)})
				continue
			}
			seen[fn.Key()] = file
			fns = append(fns, fn)
		}
	}
	// Ordered by "namespace/name" as text, as they always were listed.
	slices.SortFunc(fns, func(a, b Entry) int { return cmp.Compare(a.Key().String(), b.Key().String()) })
	return fns, errs
}

func manifestFiles(dir string) ([]string, error) {
	if st, err := os.Stat(dir); err == nil && st.Mode().IsRegular() {
		return []string{dir}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("functions directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.Type().IsRegular() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}

func loadFile(file string, srcs sources) ([]Entry, []error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, []error{&FileError{File: file, Err: err}}
	}
	var (
		fns  []Entry
		errs []error
	)
	for _, doc := range v1alpha1.DecodeDocuments(data) {
		var problems []error // the document's, every one at once
		if doc.Err != nil {
			for _, e := range unjoin(doc.Err) {
				problems = append(problems, &v1alpha1.DocumentError{Line: doc.Line, Err: e})
			}
		}
		fn := doc.Function
		if fn == nil {
			for _, p := range problems {
				errs = append(errs, &FileError{File: file, Err: p})
			}
			continue
		}
		if fn.Namespace == "" {
			fn.Namespace = srcs.namespace
		}
		fn.Default()
		for _, fe := range srcs.validate(fn) {
			problems = append(problems, fe)
		}
		if len(problems) > 0 {
			for _, p := range problems {
				errs = append(errs, &FileError{File: file, Function: fn.Namespace + "/" + fn.Name,
					Err: fmt.Errorf("function %s/%s: %w", fn.Namespace, fn.Name, p)})
			}
			continue
		}
		if fn.Spec.Source == "" { // an image to run as it is, on a cluster
			fns = append(fns, Entry{Function: fn, File: file})
			continue
		}
		src, err := srcs.resolve(file, fn.Spec.Source)
		if err != nil {
			errs = append(errs, &FileError{File: file, Function: fn.Namespace + "/" + fn.Name, Err: fmt.Errorf("function %s/%s: %w", fn.Namespace, fn.Name, err)})
			continue
		}
		fns = append(fns, Entry{Function: fn, File: file, SourceDir: src})
	}
	return fns, errs
}

// sources resolves the spec.source of the manifests of one directory.
type sources struct {
	dir        string // absolute, as given, for messages
	realDir    string // dir with symlinks resolved, for comparisons
	external   bool   // LoadOptions.AllowExternalSources
	kubernetes bool   // LoadOptions.Kubernetes
	namespace  string // LoadOptions.Namespace
}

// validate checks fn for where it will run. On a cluster, a runtime's
// source stands for the image that will be built from it.
func (s sources) validate(fn *v1alpha1.Function) field.ErrorList {
	if !s.kubernetes {
		return v1alpha1.Validate(fn, v1alpha1.ModeLocal)
	}
	if fn.Spec.Source != "" && fn.Spec.Runtime != "" && fn.Spec.Image == "" {
		built := fn.DeepCopy()
		built.Spec.Image = "built/from/source"
		return v1alpha1.Validate(built, v1alpha1.ModeKubernetes)
	}
	return v1alpha1.Validate(fn, v1alpha1.ModeKubernetes)
}

func newSources(dir string, opts LoadOptions) (sources, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return sources{}, fmt.Errorf("functions directory: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return sources{}, fmt.Errorf("functions directory: %w", err)
	}
	return sources{dir: abs, realDir: resolved, external: opts.AllowExternalSources, kubernetes: opts.Kubernetes,
		namespace: opts.Namespace}, nil
}

// resolve returns the absolute directory that source, the spec.source of
// manifest file, names, relative to the manifest.
func (s sources) resolve(file, source string) (string, error) {
	src := source
	if !filepath.IsAbs(src) {
		src = filepath.Join(filepath.Dir(file), src)
	}
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		return "", fmt.Errorf("spec.source: %q is not a directory", source)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", fmt.Errorf("spec.source %q: %w", source, err)
	}
	if s.external {
		return abs, nil
	}
	if err := s.inside(abs); err != nil {
		return "", fmt.Errorf("spec.source %q: %w", source, err)
	}
	return abs, nil
}

// inside checks that src is dir or below it once symlinks are resolved on
// both sides: comparing the paths as written would let a link inside dir
// lead outside, and refuse a dir that is itself reached through a link.
func (s sources) inside(src string) error {
	resolved, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(s.realDir, resolved); err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("outside the manifests directory %s (allow with --allow-external-sources)", s.dir)
	}
	return nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// SkipDir reports directories whose content is not the function's source:
// installed dependencies, caches and hidden directories.
func SkipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "__pycache__"
}

// Fingerprint changes when the function's spec or any file of its source
// changes (by name, size and modification time), so a poll can tell which
// functions need a rebuild without reading their files.
func Fingerprint(fn Entry) (string, error) {
	h := sha256.New()
	spec, err := json.Marshal(fn.Spec)
	if err != nil {
		return "", err
	}
	h.Write(spec)
	err = filepath.WalkDir(fn.SourceDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != fn.SourceDir && SkipDir(d.Name()) {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "\x00%s\x00%d\x00%d", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("fingerprint %s: %w", fn.SourceDir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
