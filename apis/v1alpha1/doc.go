// Package v1alpha1 holds the Function API (group sless.dev, version
// v1alpha1): the types users write in manifests and apply with kubectl, the
// defaults, and the validation shared by the Kubernetes controller and the
// local platform, so that a manifest means the same thing in both places.
//
// +kubebuilder:object:generate=true
// +groupName=sless.dev
package v1alpha1
