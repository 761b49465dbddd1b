// Package deploy takes the Function manifests that sless dev serves to a
// cluster unchanged, the way ko resolves images: each Function with a
// source is built into an image (package fnimage), pushed, and applied with
// spec.image set to the pushed digest; a Function with only an image is
// applied as it is.
//
// Nothing reaches the cluster unless everything can: the manifests are
// checked before any build, and a failed build or push applies nothing.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/fnimage"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/ociimage"
	"sless.dev/sless/runtimes"
)

// FieldOwner is the field manager of what deploy applies.
const FieldOwner = "sless-deploy"

// Options configure a deploy.
type Options struct {
	// Registry receives the images, as Registry/<namespace>/<name>.
	Registry string
	// Builder builds them.
	Builder *fnimage.Builder
	// Client applies the Functions; nil builds and pushes only.
	Client client.Client
	// Progress receives a line per step.
	Progress io.Writer
}

// Load reads and checks the Functions of a manifest file or directory for
// a cluster, every problem at once; namespace is the one of Functions
// whose manifest names none ("" for "default").
func Load(path, namespace string) ([]manifests.Entry, error) {
	fns, errs := manifests.Load(path, manifests.LoadOptions{Kubernetes: true, AllowExternalSources: true, Namespace: namespace})
	if len(errs) > 0 {
		return nil, &ManifestErrors{Errs: errs}
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("no Function in %s", path)
	}
	return fns, nil
}

// ManifestErrors are every problem Load found, each naming its file and,
// where it has one, the function and field: nothing was done.
type ManifestErrors struct{ Errs []error }

func (e *ManifestErrors) Error() string {
	var b strings.Builder
	if len(e.Errs) == 1 {
		b.WriteString("1 problem in the manifests, nothing done:")
	} else {
		fmt.Fprintf(&b, "%d problems in the manifests, nothing done:", len(e.Errs))
	}
	for _, err := range e.Errs {
		b.WriteString("\n  " + strings.ReplaceAll(err.Error(), "\n", "\n    "))
	}
	return b.String()
}

func (e *ManifestErrors) Unwrap() []error { return e.Errs }

// Deployed is a Function as it was applied.
type Deployed struct {
	Namespace, Name string
	// Image is what it runs: the pushed digest, or the manifest's image.
	Image string
}

// Run builds and pushes the image of each runtime's Function with a
// source (Entry.Built), then,
// only if all succeeded, applies every Function. The error of a build or
// push names its function; the Functions of a failed run are not applied.
func Run(ctx context.Context, fns []manifests.Entry, o Options) ([]Deployed, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	deployed := make([]Deployed, len(fns))
	var errs []error
	for i, fn := range fns {
		deployed[i] = Deployed{Namespace: fn.Namespace, Name: fn.Name, Image: fn.Spec.Image}
		if !fn.Built() {
			continue
		}
		image, err := o.buildAndPush(ctx, fn)
		if err != nil {
			errs = append(errs, NamingFunction(fn, err))
			continue
		}
		deployed[i].Image = image
	}
	if len(errs) > 0 {
		what := "nothing applied"
		if o.Client == nil {
			what = "the others were pushed"
		}
		return nil, fmt.Errorf("%s, %s:\n  %w", countFailed(len(errs)), what, errors.Join(errs...))
	}
	if o.Client == nil {
		return deployed, nil
	}
	// A dry run of every apply first: what the API server would refuse (a
	// missing namespace, a rule of the CRD, an admission webhook) is found
	// before anything changes.
	for i, fn := range fns {
		if err := apply(ctx, o.Client, fn, deployed[i].Image, client.DryRunAll); err != nil {
			errs = append(errs, fmt.Errorf("function %s: %w", fn.Key(), err))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("nothing applied:\n  %w", errors.Join(errs...))
	}
	for i, fn := range fns {
		if err := apply(ctx, o.Client, fn, deployed[i].Image); err != nil {
			return deployed[:i], fmt.Errorf("apply function %s: %w", fn.Key(), err)
		}
		fmt.Fprintf(o.Progress, "%s: applied\n", fn.Key())
	}
	return deployed, nil
}

// Source is what a build of fn's image needs of it.
func Source(fn manifests.Entry) runtimes.Source {
	return runtimes.Source{Namespace: fn.Namespace, Name: fn.Name, Runtime: fn.Spec.Runtime, Dir: fn.SourceDir,
		Handler: fn.Spec.EffectiveHandler(), Env: fn.Spec.EnvValues()}
}

// NamingFunction is err, about fn, saying which function it is about
// unless it says so already, as the runtimes' build errors do ("go
// function ns/name: ...", "python handler h of ns/name ...").
func NamingFunction(fn manifests.Entry, err error) error {
	msg, key := err.Error(), fn.Key().String()
	if strings.Contains(msg, "function "+key) || strings.Contains(msg, " of "+key) {
		return err
	}
	return fmt.Errorf("function %s: %w", key, err)
}

// countFailed says how many functions could not be built or pushed.
func countFailed(n int) string {
	if n == 1 {
		return "1 function failed"
	}
	return fmt.Sprintf("%d functions failed", n)
}

// Repository is where the image of a Function goes in registry.
func Repository(registry, namespace, name string) string {
	return strings.TrimSuffix(registry, "/") + "/" + namespace + "/" + name
}

func (o Options) buildAndPush(ctx context.Context, fn manifests.Entry) (string, error) {
	if o.Registry == "" {
		return "", errors.New("no registry to push its image to")
	}
	start := time.Now()
	fmt.Fprintf(o.Progress, "%s: building %s\n", fn.Key(), fn.SourceDir)
	img, err := o.Builder.Build(ctx, Source(fn))
	if err != nil {
		return "", err
	}
	ref, err := ociimage.Push(ctx, img, Repository(o.Registry, fn.Namespace, fn.Name)+":latest")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(o.Progress, "%s: pushed %s in %s\n", fn.Key(), ref, time.Since(start).Round(100*time.Millisecond))
	return ref, nil
}

// apply applies fn by server-side apply, with image as its image: the
// fields deploy applied before and no longer sets are removed.
func apply(ctx context.Context, c client.Client, fn manifests.Entry, image string, opts ...client.ApplyOption) error {
	f := fn.DeepCopy()
	f.Spec.Image = image
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sless.dev/v1alpha1", "kind": "Function", "spec": obj["spec"],
		"metadata": map[string]any{"name": f.Name, "namespace": f.Namespace},
	}}
	if len(f.Labels) > 0 {
		_ = unstructured.SetNestedStringMap(u.Object, f.Labels, "metadata", "labels")
	}
	if len(f.Annotations) > 0 {
		_ = unstructured.SetNestedStringMap(u.Object, f.Annotations, "metadata", "annotations")
	}
	opts = append(opts, client.FieldOwner(FieldOwner), client.ForceOwnership)
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}
