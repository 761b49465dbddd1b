package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "sless.dev", Version: "v1alpha1"}

var schemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Function{}, &FunctionList{}, &FunctionRun{}, &FunctionRunList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
})

// AddToScheme registers the Function types with a scheme, so that clients
// and controllers built on that scheme can read and write Functions.
var AddToScheme = schemeBuilder.AddToScheme
