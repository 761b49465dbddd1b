package v1alpha1

import (
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

// typeErrors reports every value of the JSON object data that does not fit
// its field of the struct type t, each with its path. The JSON decoder
// stops at the first such value (or keeps only the first), so a manifest
// with two mistakes would take two runs to fix; decoding field by field
// shows them all at once, as validation does. Values that fit are decoded
// once per level they sit under, which only matters for a broken manifest.
func typeErrors(data []byte, t reflect.Type) field.ErrorList {
	return structTypeErrors(nil, data, t)
}

// valueTypeErrors decodes data into a new t and, when that fails, looks
// into its fields, items or values for the culprits; a value it cannot
// look into (a scalar, a type that decodes itself, a value of the wrong
// JSON kind) is the culprit itself.
func valueTypeErrors(p *field.Path, data []byte, t reflect.Type) field.ErrorList {
	err := kjson.UnmarshalCaseSensitivePreserveInts(data, reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	var errs field.ErrorList
	switch t = deref(t); {
	case decodesItself(t): // its own error is the one to show
	case t.Kind() == reflect.Struct:
		errs = structTypeErrors(p, data, t)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		errs = listTypeErrors(p, data, t)
	case t.Kind() == reflect.Map:
		errs = mapTypeErrors(p, data, t)
	}
	if len(errs) == 0 {
		return field.ErrorList{typeError(p, data, err)}
	}
	return errs
}

func structTypeErrors(p *field.Path, data []byte, t reflect.Type) field.ErrorList {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	fields := jsonFields(t)
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if ft, ok := fields[k]; ok { // unknown fields are the strict decoder's to report
			errs = append(errs, valueTypeErrors(p.Child(k), obj[k], ft)...)
		}
	}
	return errs
}

func listTypeErrors(p *field.Path, data []byte, t reflect.Type) field.ErrorList {
	var items []json.RawMessage
	if json.Unmarshal(data, &items) != nil {
		return nil
	}
	var errs field.ErrorList
	for i, item := range items {
		errs = append(errs, valueTypeErrors(p.Index(i), item, t.Elem())...)
	}
	return errs
}

func mapTypeErrors(p *field.Path, data []byte, t reflect.Type) field.ErrorList {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		errs = append(errs, valueTypeErrors(p.Key(k), obj[k], t.Elem())...)
	}
	return errs
}

// jsonFields maps the JSON names of struct type t to their field types,
// with the fields of untagged embedded structs (such as TypeMeta's, tagged
// ",inline") promoted unless t has a field of the same name, as
// encoding/json does. Fields with the ",string" option are left out: their
// value cannot be decoded on its own.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-" || !f.IsExported() && !f.Anonymous || slices.Contains(strings.Split(opts, ","), "string"):
		case f.Anonymous && name == "" && deref(f.Type).Kind() == reflect.Struct:
			for n, ft := range jsonFields(deref(f.Type)) {
				if _, direct := fields[n]; !direct {
					fields[n] = ft
				}
			}
		case f.IsExported():
			fields[cmp.Or(name, f.Name)] = f.Type
		}
	}
	return fields
}

// typeError describes the value data at p that err says does not fit.
func typeError(p *field.Path, data []byte, err error) *field.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return field.TypeInvalid(p, json.RawMessage(data), "must be of type "+jsonType(te.Type))
	}
	return field.TypeInvalid(p, json.RawMessage(data), err.Error())
}

// jsonType names the JSON type a Go type decodes from; integers keep
// their Go name, which tells their range.
func jsonType(t reflect.Type) string {
	switch t = deref(t); t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "list"
	default:
		return t.Kind().String()
	}
}

func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(reflect.TypeFor[json.Unmarshaler]()) || pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
