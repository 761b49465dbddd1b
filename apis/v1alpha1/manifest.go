package v1alpha1

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// DocumentError reports one document of a manifest that did not decode into
// a Function.
//
// +kubebuilder:object:generate=false
type DocumentError struct {
	// Line is the 1-based line of the manifest where the document starts.
	Line int
	Err  error
}

func (e *DocumentError) Error() string {
	return fmt.Sprintf("document at line %d: %v", e.Line, e.Err)
}

func (e *DocumentError) Unwrap() error { return e.Err }

// DecodeManifest decodes every Function in a multi-document YAML manifest,
// as written for kubectl apply. Unknown and duplicate fields are errors, so
// a typo is reported rather than silently ignored; every value of the wrong
// type is reported, with its path, not only the first. A bad document does not
// stop the others: DecodeManifest returns the Functions it could decode and
// the errors of the rest, each a *DocumentError, joined. Documents that are
// empty or only comments are skipped.
func DecodeManifest(data []byte) ([]Function, error) {
	var (
		fns  []Function
		errs []error
	)
	for _, doc := range DecodeDocuments(data) {
		switch {
		case doc.Err != nil:
			errs = append(errs, &DocumentError{Line: doc.Line, Err: doc.Err})
		case doc.Function != nil:
			fns = append(fns, *doc.Function)
		}
	}
	return fns, errors.Join(errs...)
}

// Document is one document of a manifest, as DecodeDocuments reads it.
//
// +kubebuilder:object:generate=false
type Document struct {
	// Line is the 1-based line of the manifest where the document starts.
	Line int
	// Function is what the document holds, when it could be decoded: also
	// when it has unknown fields, so that its other problems can be found
	// at once.
	Function *Function
	// Run is the FunctionRun the document holds instead, decoded as
	// strictly.
	Run *FunctionRun
	// Err is what is wrong with the document: unknown fields (each with
	// its path, joined), values of the wrong type, not a Function.
	Err error
}

// DecodeDocuments decodes every document of a manifest as DecodeManifest
// does, keeping a Function that has unknown fields beside them. Empty
// documents are left out.
func DecodeDocuments(data []byte) []Document {
	var docs []Document
	for doc := range splitDocuments(data) {
		d := decodeDocument(doc.data)
		if d.Function != nil || d.Run != nil || d.Err != nil {
			d.Line = doc.line
			docs = append(docs, d)
		}
	}
	return docs
}

func decodeDocument(data []byte) Document {
	var d Document
	switch kind, err := kindOf(data); {
	case err != nil:
		d.Err = err
	case kind == "FunctionRun":
		d.Run, d.Err = decodeStrict[FunctionRun](data)
	case kind == "Function":
		d.Function, d.Err = decodeStrict[Function](data)
	}
	return d
}

// kindOf is the kind of a document of this API group and version, "" for
// an empty document.
func kindOf(data []byte) (string, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	var probe any
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return "", err
	}
	if probe == nil {
		return "", nil // empty document
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if head.APIVersion != GroupVersion.String() || head.Kind != "Function" && head.Kind != "FunctionRun" {
		return "", fmt.Errorf("apiVersion %q kind %q is not a %s Function or FunctionRun", head.APIVersion, head.Kind, GroupVersion)
	}
	return head.Kind, nil
}

// decodeStrict decodes a document into a T, reporting every field of the
// wrong type and every unknown one; with unknown fields alone, the T is
// returned beside them.
func decodeStrict[T any](data []byte) (*T, error) {
	js, err := yaml.YAMLToJSONStrict(data) // refuses duplicate keys
	if err != nil {
		return nil, err
	}
	var v T
	strict, err := kjson.UnmarshalStrict(js, &v, kjson.DisallowUnknownFields)
	if err != nil {
		if errs := typeErrors(js, reflect.TypeFor[T]()); len(errs) > 0 {
			return nil, errs.ToAggregate() // all of them, not only the first
		}
		return nil, err
	}
	if len(strict) > 0 {
		return &v, errors.Join(strict...) // unknown fields, each with its path
	}
	return &v, nil
}

// +kubebuilder:object:generate=false
type document struct {
	line int
	data []byte
}

// splitDocuments yields the documents of a YAML stream, split at "---"
// lines, with the line each starts on.
func splitDocuments(data []byte) func(yield func(document) bool) {
	return func(yield func(document) bool) {
		start, startLine, line := 0, 1, 1
		for off := 0; off <= len(data); {
			end := bytes.IndexByte(data[off:], '\n')
			if end < 0 {
				end = len(data)
			} else {
				end += off
			}
			if isSeparator(data[off:end]) {
				if !yield(document{line: startLine, data: data[start:off]}) {
					return
				}
				start, startLine = end+1, line+1
			}
			off, line = end+1, line+1
		}
		if start < len(data) {
			yield(document{line: startLine, data: data[start:]})
		}
	}
}

func isSeparator(l []byte) bool {
	l = bytes.TrimRight(l, " \t\r")
	return bytes.Equal(l, []byte("---")) || bytes.HasPrefix(l, []byte("--- ")) || bytes.HasPrefix(l, []byte("---\t"))
}
