package local

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/timeline"
)

// overrides are a session's changes to a function through the admin API
// (the console's actions): they hold until sless dev stops, and through
// edits of its manifest; the manifest file is never written.
type overrides = adminapi.Overrides

// effective is e's function with the session's overrides applied; the
// manifest's own when there are none. Called with p.mu held.
func (e *entry) effective() manifests.Entry {
	o := e.over
	if o.IsZero() {
		return e.fn
	}
	fn := e.fn
	fn.Function = e.fn.DeepCopy()
	for i, t := range fn.Spec.Triggers {
		if on, ok := o.Triggers[t.Name]; ok {
			fn.Spec.Triggers[i].Enabled = &on
		}
	}
	if o.Min != nil {
		fn.Spec.Scale.Min = *o.Min
	}
	if o.Max != nil {
		fn.Spec.Scale.Max = *o.Max
	}
	return fn
}

// backend is the local platform as the admin API's adminapi.Backend.
type backend struct{ p *Platform }

func (b backend) Functions(context.Context) ([]FunctionStatus, error) { return b.p.Functions(), nil }

func (b backend) Function(_ context.Context, namespace, name string) (FunctionStatus, error) {
	st, ok := b.p.Function(namespace, name)
	if !ok {
		return st, adminapi.Unknown(namespace, name)
	}
	return st, nil
}

func (b backend) SetTrigger(ctx context.Context, namespace, name, trigger string, enabled bool) (FunctionStatus, error) {
	return b.p.override(ctx, namespace, name, func(fn manifests.Entry, o *overrides) error {
		for _, t := range fn.Spec.Triggers {
			if t.Name != trigger {
				continue
			}
			o.Triggers[trigger] = enabled
			if t.IsEnabled() == enabled {
				delete(o.Triggers, trigger) // back to the manifest's
			}
			return nil
		}
		return adminapi.NotFound("%s has no trigger %q", fn.Key(), trigger)
	})
}

func (b backend) SetScale(ctx context.Context, namespace, name string, s adminapi.Scale) (FunctionStatus, error) {
	return b.p.override(ctx, namespace, name, func(fn manifests.Entry, o *overrides) error {
		next := adminapi.Scale{Min: cmp.Or(s.Min, o.Min), Max: cmp.Or(s.Max, o.Max)}
		if err := next.Check(fn.Spec.Scale); err != nil {
			return err
		}
		o.Min, o.Max = next.Min, next.Max
		return nil
	})
}

func (b backend) Manifest(_ context.Context, namespace, name string) (adminapi.Manifest, error) {
	fn, ok := b.p.manifest(namespace, name)
	if !ok {
		return adminapi.Manifest{}, adminapi.Unknown(namespace, name)
	}
	y, err := yaml.Marshal(fn.Function)
	if err != nil {
		return adminapi.Manifest{}, fmt.Errorf("manifest of %s: %w", fn.Key(), err)
	}
	return adminapi.Manifest{File: fn.File, YAML: string(y)}, nil
}

func (b backend) Target(_ context.Context, namespace, name string) (adminapi.Target, error) {
	fn, ok := b.p.manifest(namespace, name)
	if !ok {
		return adminapi.Target{}, adminapi.Unknown(namespace, name)
	}
	return adminapi.Target{URL: b.p.URL(namespace, name), Timeout: time.Duration(fn.Spec.TimeoutSeconds) * time.Second}, nil
}

// manifest is a function as loaded from its manifest, overrides left out.
func (p *Platform) manifest(namespace, name string) (manifests.Entry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.fns[types.NamespacedName{Namespace: namespace, Name: name}]
	if e == nil {
		return manifests.Entry{}, false
	}
	return e.fn, true
}

// override changes a function's overrides with change, which may refuse
// (given the manifest's function), and applies them when it runs.
func (p *Platform) override(ctx context.Context, namespace, name string, change func(fn manifests.Entry, o *overrides) error) (FunctionStatus, error) {
	p.mu.Lock()
	e := p.fns[types.NamespacedName{Namespace: namespace, Name: name}]
	if e == nil {
		p.mu.Unlock()
		return FunctionStatus{}, adminapi.Unknown(namespace, name)
	}
	o := e.over
	o.Triggers = maps.Clone(e.over.Triggers)
	if o.Triggers == nil {
		o.Triggers = map[string]bool{}
	}
	if err := change(e.fn, &o); err != nil {
		p.mu.Unlock()
		return FunctionStatus{}, err
	}
	e.over = o
	running := e.running
	p.mu.Unlock()
	if running {
		p.start(ctx, e)
	}
	st, _ := p.Function(namespace, name)
	return st, nil
}

// Bounds of what source answers: files listed, bytes of one file shown,
// bytes shown in all.
const (
	maxSourceFiles     = 500
	maxSourceFileBytes = 256 << 10
	maxSourceBytes     = 4 << 20
)

// SourceFile is one file of a function's source.
type SourceFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Content is the file's text; empty with Omitted saying why (binary,
	// too large, a symbolic link, over the answer's budget).
	Content string `json:"content,omitempty"`
	Omitted string `json:"omitted,omitempty"`
}

// source answers GET .../source: the files of the function's source
// directory, read-only.
func (p *Platform) source(w http.ResponseWriter, r *http.Request) {
	fn, ok := p.manifest(r.PathValue("namespace"), r.PathValue("name"))
	if !ok {
		writeUnknown(w, r)
		return
	}
	files, truncated, err := readSource(fn.SourceDir)
	if err != nil {
		adminapi.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"dir": fn.SourceDir, "files": files, "truncated": truncated})
}

func readSource(dir string) (files []SourceFile, truncated bool, err error) {
	budget := int64(maxSourceBytes)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && manifests.SkipDir(d.Name()) { // what a fingerprint leaves out too
				return filepath.SkipDir
			}
			return nil
		}
		if len(files) == maxSourceFiles {
			truncated = true
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f := SourceFile{Path: filepath.ToSlash(rel), Size: info.Size()}
		readSourceFile(&f, path, d, &budget)
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read source %s: %w", dir, err)
	}
	return files, truncated, nil
}

// readSourceFile fills f's content from path, within budget.
func readSourceFile(f *SourceFile, path string, d fs.DirEntry, budget *int64) {
	switch {
	case d.Type()&fs.ModeSymlink != 0:
		f.Omitted = "symbolic link" // it may point out of the source
		return
	case !d.Type().IsRegular():
		f.Omitted = "not a regular file"
		return
	case f.Size > maxSourceFileBytes:
		f.Omitted = fmt.Sprintf("larger than %d KiB", maxSourceFileBytes>>10)
		return
	case f.Size > *budget:
		f.Omitted = "over the answer's size budget"
		return
	}
	b, err := readFileUpTo(path, maxSourceFileBytes)
	switch {
	case err != nil:
		f.Omitted = err.Error()
	case !utf8.Valid(b):
		f.Omitted = "binary"
	default:
		f.Content = string(b)
		*budget -= int64(len(b))
	}
}

func readFileUpTo(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// sample records every function's gauges in the timeline each period
// until ctx ends.
func (p *Platform) sample(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		p.sampleOnce(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Platform) sampleOnce(now time.Time) {
	buffered := p.act.Buffered()
	p.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(p.fns))
	for _, e := range p.fns {
		keys = append(keys, e.fn.Key())
	}
	p.mu.Unlock()
	for _, k := range keys {
		sup, _ := p.sup.Status(k.Namespace, k.Name)
		p.timeline.Sample(now, k.Namespace, k.Name, timeline.Gauges{Desired: sup.Desired, Ready: sup.Ready,
			Buffered: buffered[k], QueueDepth: p.scaler.QueueDepth(k.Namespace, k.Name)})
	}
}
