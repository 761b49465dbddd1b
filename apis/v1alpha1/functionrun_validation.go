package v1alpha1

import (
	"encoding/json"
	"net/http"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var runMethod = regexp.MustCompile(`^[A-Z]{1,16}$`)

// Default sets what the API server defaults in a FunctionRun: method POST,
// path "/".
func (r *FunctionRun) Default() {
	if r.Spec.Method == "" {
		r.Spec.Method = http.MethodPost
	}
	if r.Spec.Path == "" {
		r.Spec.Path = "/"
	}
}

// ValidateFunctionRun checks a defaulted FunctionRun as its CRD does, for
// the manifests sless dev loads without an API server.
func ValidateFunctionRun(r *FunctionRun) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1123Subdomain(r.Name) {
		errs = append(errs, field.Invalid(meta.Child("name"), r.Name, msg))
	}
	if r.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(r.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), r.Namespace, msg))
		}
	}
	p := field.NewPath("spec")
	s := &r.Spec
	switch {
	case s.Function == "":
		errs = append(errs, field.Required(p.Child("function"), "the Function to run"))
	case len(s.Function) > 63:
		errs = append(errs, field.TooLong(p.Child("function"), s.Function, 63))
	}
	if !runMethod.MatchString(s.Method) {
		errs = append(errs, field.Invalid(p.Child("method"), s.Method, "an HTTP method in capitals, such as POST"))
	}
	switch {
	case s.Path == "" || s.Path[0] != '/' && s.Path[0] != '?':
		errs = append(errs, field.Invalid(p.Child("path"), s.Path, "starts with / or ?"))
	case len(s.Path) > 2048:
		errs = append(errs, field.TooLong(p.Child("path"), s.Path, 2048))
	}
	if len(s.Headers) > 64 {
		errs = append(errs, field.TooMany(p.Child("headers"), len(s.Headers), 64))
	}
	if s.Body != nil && !json.Valid(s.Body.Raw) {
		errs = append(errs, field.Invalid(p.Child("body"), string(s.Body.Raw), "not a JSON value"))
	}
	if s.TTLSecondsAfterFinished != nil && *s.TTLSecondsAfterFinished < 0 {
		errs = append(errs, field.Invalid(p.Child("ttlSecondsAfterFinished"), *s.TTLSecondsAfterFinished, "must be 0 or more"))
	}
	return errs
}
