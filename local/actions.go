package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/local/manifests"
	"sless.dev/sless/timeline"
)

// Overrides are the changes a session made to a function through the
// admin API (the console's actions): they hold until sless dev stops, and
// through edits of its manifest; the manifest file is never written.
type Overrides struct {
	// Triggers maps a trigger's name to whether it is enabled.
	Triggers map[string]bool `json:"triggers,omitempty"`
	Min      *int32          `json:"min,omitempty"`
	Max      *int32          `json:"max,omitempty"`
}

func (o Overrides) empty() bool { return len(o.Triggers) == 0 && o.Min == nil && o.Max == nil }

// overrides is an entry's Overrides.
type overrides = Overrides

// effective is e's function with the session's overrides applied; the
// manifest's own when there are none. Called with p.mu held.
func (e *entry) effective() manifests.Function {
	if e.over.empty() {
		return e.fn
	}
	fn := e.fn
	fn.Function = e.fn.DeepCopy()
	for i, t := range fn.Spec.Triggers {
		if on, ok := e.over.Triggers[t.Name]; ok {
			fn.Spec.Triggers[i].Enabled = &on
		}
	}
	if e.over.Min != nil {
		fn.Spec.Scale.Min = *e.over.Min
	}
	if e.over.Max != nil {
		fn.Spec.Scale.Max = *e.over.Max
	}
	return fn
}

var errUnknown = errors.New("unknown function")

// override changes a function's overrides with change, which may refuse
// (given the manifest's function), and applies them when it runs.
func (p *Platform) override(ctx context.Context, namespace, name string, change func(fn manifests.Function, o *Overrides) error) (FunctionStatus, error) {
	p.mu.Lock()
	e := p.fns[namespace+"/"+name]
	if e == nil {
		p.mu.Unlock()
		return FunctionStatus{}, errUnknown
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

// setTrigger answers PATCH .../triggers/{trigger} {"enabled": bool}.
func (p *Platform) setTrigger(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Enabled *bool `json:"enabled"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Enabled == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `the body must be {"enabled": true} or {"enabled": false}`})
		return
	}
	trigger := r.PathValue("trigger")
	st, err := p.override(r.Context(), r.PathValue("namespace"), r.PathValue("name"), func(fn manifests.Function, o *Overrides) error {
		for _, t := range fn.Spec.Triggers {
			if t.Name == trigger {
				o.Triggers[trigger] = *body.Enabled
				if t.IsEnabled() == *body.Enabled {
					delete(o.Triggers, trigger) // back to the manifest's
				}
				return nil
			}
		}
		return fmt.Errorf("%w: %s has no trigger %q", errNotFound, fn.Key(), trigger)
	})
	writeResult(w, r, st, err)
}

// setScale answers PATCH .../scale {"min": n, "max": n}: either or both.
func (p *Platform) setScale(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Min, Max *int32
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Min == nil && body.Max == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `the body must set min, max or both: {"min": 1, "max": 5}`})
		return
	}
	st, err := p.override(r.Context(), r.PathValue("namespace"), r.PathValue("name"), func(fn manifests.Function, o *Overrides) error {
		lo, hi := fn.Spec.Scale.Min, fn.Spec.Scale.Max
		o.Min, o.Max = cmpOr(body.Min, o.Min), cmpOr(body.Max, o.Max)
		if o.Min != nil {
			lo = *o.Min
		}
		if o.Max != nil {
			hi = *o.Max
		}
		if lo < 0 || hi < 1 || lo > hi {
			return fmt.Errorf("%w: min %d and max %d: want 0 ≤ min ≤ max and max ≥ 1", errBadInput, lo, hi)
		}
		return nil
	})
	writeResult(w, r, st, err)
}

func cmpOr(a, b *int32) *int32 {
	if a != nil {
		return a
	}
	return b
}

var (
	errNotFound = errors.New("not found")
	errBadInput = errors.New("bad input")
)

// writeResult answers an action's result or its error.
func writeResult(w http.ResponseWriter, r *http.Request, st FunctionStatus, err error) {
	switch {
	case errors.Is(err, errUnknown):
		writeUnknown(w, r)
	case errors.Is(err, errNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": strings.TrimPrefix(err.Error(), errNotFound.Error()+": ")})
	case err != nil:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": strings.TrimPrefix(err.Error(), errBadInput.Error()+": ")})
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

// maxActionBody bounds an action's JSON body but an invocation's.
const maxActionBody = 64 << 10

// readJSON decodes r's body into v, or answers 400 or 413 and reports false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return readJSONUpTo(w, r, v, maxActionBody)
}

func readJSONUpTo(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("the body is more than %d bytes", limit)})
		return false
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad JSON body: " + err.Error()})
		return false
	}
	return true
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

// skipDirs are the dependency and build directories runtimes make inside
// a source: not the user's code.
var skipDirs = []string{".git", "node_modules", ".venv", "__pycache__", ".sless"}

// source answers GET .../source: the files of the function's source
// directory, read-only.
func (p *Platform) source(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	e := p.fns[r.PathValue("namespace")+"/"+r.PathValue("name")]
	var dir string
	if e != nil {
		dir = e.fn.SourceDir
	}
	p.mu.Unlock()
	if e == nil {
		writeUnknown(w, r)
		return
	}
	files, truncated, err := readSource(dir)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dir": dir, "files": files, "truncated": truncated})
}

func readSource(dir string) (files []SourceFile, truncated bool, err error) {
	budget := int64(maxSourceBytes)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && slices.Contains(skipDirs, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if len(files) == maxSourceFiles {
			truncated = true
			return filepath.SkipAll
		}
		rel, _ := filepath.Rel(dir, path)
		f := SourceFile{Path: filepath.ToSlash(rel)}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f.Size = info.Size()
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

// manifest answers GET .../manifest: the function as loaded from its
// file, defaults filled in, as YAML.
func (p *Platform) manifest(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	e := p.fns[r.PathValue("namespace")+"/"+r.PathValue("name")]
	var fn manifests.Function
	if e != nil {
		fn = e.fn
	}
	p.mu.Unlock()
	if e == nil {
		writeUnknown(w, r)
		return
	}
	y, err := yaml.Marshal(fn.Function)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"file": fn.File, "yaml": string(y)})
}

// serveTimeline answers GET .../timeline: the last 15 minutes, by step.
func (p *Platform) serveTimeline(w http.ResponseWriter, r *http.Request) {
	s, ok := p.timeline.Series(time.Now(), r.PathValue("namespace"), r.PathValue("name"))
	if !ok {
		writeUnknown(w, r)
		return
	}
	writeJSON(w, http.StatusOK, s)
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
	keys := make([][2]string, 0, len(p.fns))
	for _, e := range p.fns {
		keys = append(keys, [2]string{e.fn.Namespace, e.fn.Name})
	}
	p.mu.Unlock()
	for _, k := range keys {
		sup, _ := p.sup.Status(k[0], k[1])
		p.timeline.Sample(now, k[0], k[1], timeline.Gauges{Desired: sup.Desired, Ready: sup.Ready,
			Buffered: buffered[k[0]+"/"+k[1]], QueueDepth: p.scaler.QueueDepth(k[0], k[1])})
	}
}

// Invocation is an invoke action: a request sent to the function through
// the activator, as any client's.
type Invocation struct {
	Method string `json:"method"`
	// Path is appended to the function's URL: "/", "/items?id=1".
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// InvocationResult is the function's answer to an invoke action.
type InvocationResult struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	// Truncated is set when the body was longer than shown.
	Truncated  bool    `json:"truncated,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// maxShownBody bounds the answer's body an invoke action shows.
const maxShownBody = 1 << 20

// invoke answers POST .../invoke.
func (p *Platform) invoke(w http.ResponseWriter, r *http.Request) {
	var in Invocation
	if !readJSONUpTo(w, r, &in, p.opts.MaxBodyBytes+maxActionBody) {
		return
	}
	st, ok := p.Function(r.PathValue("namespace"), r.PathValue("name"))
	if !ok {
		writeUnknown(w, r)
		return
	}
	in.Method = cmp.Or(in.Method, http.MethodGet)
	if in.Path != "" && !strings.HasPrefix(in.Path, "/") && !strings.HasPrefix(in.Path, "?") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path must start with / or ?"})
		return
	}
	timeout := time.Duration(st.Spec.TimeoutSeconds)*time.Second + 10*time.Second
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, in.Method, st.URL+in.Path, strings.NewReader(in.Body))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad request: " + err.Error()})
		return
	}
	for k, v := range in.Headers {
		req.Header.Set(k, v)
	}
	res, err := p.call(req)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// call sends req and reads its answer, up to maxShownBody of its body.
func (p *Platform) call(req *http.Request) (InvocationResult, error) {
	start := time.Now()
	resp, err := p.invoker.Do(req)
	if err != nil {
		return InvocationResult{}, fmt.Errorf("invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxShownBody+1))
	if err != nil {
		return InvocationResult{}, fmt.Errorf("invoke: read the answer: %w", err)
	}
	res := InvocationResult{Status: resp.StatusCode, Headers: make(map[string]string, len(resp.Header)),
		DurationMs: float64(time.Since(start).Microseconds()) / 1000}
	if len(body) > maxShownBody {
		body, res.Truncated = body[:maxShownBody], true
	}
	res.Body = string(body)
	for k, v := range resp.Header {
		res.Headers[k] = strings.Join(v, ", ")
	}
	return res, nil
}
