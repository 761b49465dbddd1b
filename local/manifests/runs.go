package manifests

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
)

// RunEntry is a valid, defaulted FunctionRun read from a manifest.
type RunEntry struct {
	*v1alpha1.FunctionRun
	// File is the manifest it came from.
	File string
}

// Key is the FunctionRun's namespace and name.
func (r RunEntry) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// LoadRuns reads the FunctionRuns of the manifests Load reads (Load leaves
// them out), each defaulted and validated as the API server would; a bad
// one is an error naming its file and field, as a bad Function is.
func LoadRuns(dir string, opts LoadOptions) ([]RunEntry, []error) {
	files, err := manifestFiles(dir)
	if err != nil {
		return nil, []error{err}
	}
	namespace := opts.Namespace
	if namespace == "" {
		namespace = "default"
	}
	var (
		out  []RunEntry
		errs []error
		seen = map[types.NamespacedName]string{}
	)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			continue // Load reports it
		}
		for _, doc := range v1alpha1.DecodeDocuments(data) {
			r := doc.Run
			if r == nil || doc.Err != nil {
				continue // a Function, or a document Load reports
			}
			if r.Namespace == "" {
				r.Namespace = namespace
			}
			r.Default()
			key := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			problems := v1alpha1.ValidateFunctionRun(r).ToAggregate()
			switch other, dup := seen[key]; {
			case problems != nil:
				errs = append(errs, &FileError{File: file, Err: fmt.Errorf("functionrun %s: %w", key, problems)})
			case dup:
				errs = append(errs, &FileError{File: file, Err: fmt.Errorf("functionrun %s is already defined in %s", key, filepath.Base(other))})
			default:
				seen[key] = file
				out = append(out, RunEntry{FunctionRun: r, File: file})
			}
		}
	}
	return out, errs
}
