package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	imageref "github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/deploy"
	"sless.dev/sless/fnimage"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/ociimage"
	"sless.dev/sless/runtimes"
)

// imageFlags are what build and deploy share: the bases and the cache.
type imageFlags struct {
	cacheDir     string
	baseRegistry string
	bases        []string
}

func (f *imageFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.cacheDir, "cache-dir", "", "builds and installed dependencies (default: the user cache directory/sless, as sless dev's)")
	fs.StringVar(&f.baseRegistry, "base-registry", os.Getenv("SLESS_BASE_REGISTRY"),
		"registry of the runtime base images runtime-python and runtime-node (default $SLESS_BASE_REGISTRY, else those make images wrote beside this binary, in images/, else "+fnimage.DefaultBaseRegistry+")")
	fs.StringArrayVar(&f.bases, "base", nil, "RUNTIME=IMAGE: another base image for a runtime's functions, in a registry or an OCI layout directory (repeatable)")
}

func (f *imageFlags) builder(cmd *cobra.Command) (*fnimage.Builder, error) {
	cache := f.cacheDir
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
		cache = filepath.Join(dir, "sless")
	}
	b := &fnimage.Builder{Runtimes: runtimes.Options{CacheDir: cache, Progress: cmd.ErrOrStderr()},
		BaseRegistry: f.baseRegistry, Bases: map[v1alpha1.Runtime]string{}}
	for _, kv := range f.bases {
		rt, ref, ok := strings.Cut(kv, "=")
		if !ok || ref == "" || !validRuntime(v1alpha1.Runtime(rt)) {
			return nil, usageError{fmt.Errorf("--base %q: want RUNTIME=IMAGE, RUNTIME one of go, python, node", kv)}
		}
		b.Bases[v1alpha1.Runtime(rt)] = ref
	}
	if f.baseRegistry == "" {
		for rt, ref := range localBases() {
			if _, set := b.Bases[rt]; !set {
				b.Bases[rt] = ref
			}
		}
	}
	return b, nil
}

// localBases are the runtime bases `make images` wrote beside this sless
// binary (bin/images/runtime-*, OCI layouts), which a checkout's build
// uses before any registry's: a new user has them, not ghcr.io's.
func localBases() map[v1alpha1.Runtime]string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	out := map[v1alpha1.Runtime]string{}
	for _, rt := range []v1alpha1.Runtime{v1alpha1.RuntimePython, v1alpha1.RuntimeNode} {
		dir := filepath.Join(filepath.Dir(exe), "images", fnimage.BaseName(rt))
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err == nil {
			out[rt] = dir + ":" + fnimage.BaseTag
		}
	}
	return out
}

func validRuntime(rt v1alpha1.Runtime) bool {
	return rt == v1alpha1.RuntimeGo || rt == v1alpha1.RuntimePython || rt == v1alpha1.RuntimeNode
}

func newBuildCommand() *cobra.Command {
	var (
		images                   imageFlags
		file, runtime, handler   string
		name, push, output, regy string
		tag                      string
		namespace                string
	)
	cmd := &cobra.Command{
		Use:   "build [DIR]",
		Short: "Build a function's image from its source, without a container engine",
		Long: `build turns a function's source into an OCI image: a Go function compiled
statically onto a minimal base, a Python or Node function with its
dependencies (requirements.txt, package.json) installed, on its runtime's base
image. The image is pushed (--push) or written as an OCI archive (--output).

  sless build ./hello --runtime go --push 127.0.0.1:5000/default/hello
  sless build -f functions.yaml --registry 127.0.0.1:5000`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := images.builder(cmd)
			if err != nil {
				return err
			}
			if tag != "" && (file != "" || output == "") {
				return usageError{fmt.Errorf("--tag names the archive of one function (-o FILE): --push names a pushed image, and -f names each archive after its function")}
			}
			if _, err := imageref.NewTag(cmp.Or(tag, "x")); err != nil {
				return usageError{fmt.Errorf("--tag %q: want REPOSITORY:TAG (%w)", tag, err)}
			}
			if file != "" {
				if len(args) > 0 || runtime != "" {
					return usageError{fmt.Errorf("-f builds the Functions of manifests: give no DIR nor --runtime")}
				}
				if (regy == "") == (output == "") {
					return usageError{fmt.Errorf("-f needs --registry to push to or --output, a directory for the archives")}
				}
				return buildManifests(cmd, b, file, namespace, regy, output)
			}
			if len(args) != 1 || !validRuntime(v1alpha1.Runtime(runtime)) {
				return usageError{fmt.Errorf("give a source directory and --runtime go, python or node (or -f MANIFEST)")}
			}
			if (push == "") == (output == "") {
				return usageError{fmt.Errorf("give one of --push IMAGE or --output FILE")}
			}
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = filepath.Base(dir)
			}
			spec := v1alpha1.FunctionSpec{Runtime: v1alpha1.Runtime(runtime), Handler: handler}
			img, err := b.Build(cmd.Context(), runtimes.Source{Namespace: "default", Name: name, Runtime: spec.Runtime,
				Dir: dir, Handler: spec.EffectiveHandler()})
			if err != nil {
				return err
			}
			if push != "" {
				return pushImage(cmd, img, push)
			}
			return writeArchive(cmd, img, output, cmp.Or(tag, archiveName(img, "default", name)))
		},
	}
	f := cmd.Flags()
	images.add(f)
	f.StringVarP(&file, "file", "f", "", "build every Function with a source in this manifest file or directory")
	f.StringVarP(&namespace, "namespace", "n", "", "with -f: the namespace of Functions whose manifest names none (default \"default\")")
	f.StringVar(&runtime, "runtime", "", "the runtime of DIR: go, python or node")
	f.StringVar(&handler, "handler", "", "the handler (default: the runtime's)")
	f.StringVar(&name, "name", "", "the function's name, which its Go binary is named after (default: DIR's name)")
	f.StringVar(&push, "push", "", "push the image as this reference and print it by digest")
	f.StringVarP(&output, "output", "o", "", "write an OCI archive (with -f: a directory, one archive per function)")
	f.StringVarP(&tag, "tag", "t", "", "the name of the archived image, REPOSITORY:TAG, as ctr images import gives it (default localhost/default/NAME:<digest>)")
	f.StringVar(&regy, "registry", os.Getenv("SLESS_REGISTRY"), "with -f: push each image to REGISTRY/<namespace>/<name> (default $SLESS_REGISTRY)")
	return cmd
}

// buildManifests builds the runtimes' Functions with a source of a
// manifest file or directory (a Function with its own server has its
// image), pushing them to registry or writing archives into output.
func buildManifests(cmd *cobra.Command, b *fnimage.Builder, file, namespace, registry, output string) error {
	fns, err := deploy.Load(file, namespace)
	if err != nil {
		return err
	}
	if registry != "" {
		deployed, err := deploy.Run(cmd.Context(), fns, deploy.Options{Registry: registry, Builder: b, Progress: cmd.ErrOrStderr()})
		for _, d := range deployed {
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s\t%s\n", d.Namespace, d.Name, d.Image)
		}
		return err
	}
	if info, err := os.Stat(output); err == nil && !info.IsDir() {
		return usageError{fmt.Errorf("--output %s is a file: with -f it names a directory, for one archive per function", output)}
	}
	// Every function is built before any archive is written: a failure
	// leaves no half of the outputs behind, and every failure is said.
	type archive struct {
		fn  manifests.Entry
		img v1.Image
	}
	var archives []archive
	var errs []error
	for _, fn := range fns {
		if !fn.Built() {
			continue
		}
		img, err := b.Build(cmd.Context(), deploy.Source(fn))
		if err != nil {
			errs = append(errs, deploy.NamingFunction(fn, err))
			continue
		}
		archives = append(archives, archive{fn, img})
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d functions failed to build, no archive written:\n  %w", len(errs), len(errs)+len(archives), errors.Join(errs...))
	}
	if err := os.MkdirAll(output, 0o755); err != nil {
		return err
	}
	for _, a := range archives {
		file := filepath.Join(output, a.fn.Namespace+"-"+a.fn.Name+".tar")
		if err := writeArchive(cmd, a.img, file, archiveName(a.img, a.fn.Namespace, a.fn.Name)); err != nil {
			return deploy.NamingFunction(a.fn, err)
		}
	}
	return nil
}

// shipImage pushes img to push or writes it to the archive output, and
// prints where it went.
func pushImage(cmd *cobra.Command, img v1.Image, push string) error {
	ref, err := ociimage.Push(cmd.Context(), img, push)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), ref)
	return err
}

// writeArchive writes img as the OCI archive output, named ref, and
// prints both: `ctr images import` (k3s, kind's load) gives the image that
// name, which a Function's image field then names.
func writeArchive(cmd *cobra.Command, img v1.Image, output, ref string) error {
	if err := ociimage.WriteArchive(output, img, ref); err != nil {
		return err
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", output, ref)
	return err
}

// archiveName names a function's archived image when the user names none:
// localhost/NAMESPACE/NAME, tagged with its digest's first hex digits, so
// that a new build is a new name (a :latest would have the kubelet pull
// it from a registry that does not have it) and the same source the same.
func archiveName(img v1.Image, namespace, name string) string {
	tag := "build"
	if d, err := img.Digest(); err == nil {
		tag = d.Hex[:12]
	}
	return "localhost/" + namespace + "/" + name + ":" + tag
}

func newDeployCommand() *cobra.Command {
	var (
		images     imageFlags
		file, regy string
		kubeconfig string
		namespace  string
	)
	cmd := &cobra.Command{
		Use:   "deploy -f FILE|DIR",
		Short: "Build, push and apply the Functions of manifests on a cluster",
		Long: `deploy takes the manifests sless dev serves to a cluster unchanged: each
Function with a source is built into an image (as sless build does), pushed to
REGISTRY/<namespace>/<name>, and applied (server-side apply) with spec.image set
to the pushed digest; a Function with only an image is applied as it is.

Nothing reaches the cluster unless all of it can: invalid manifests are refused
before any build, and a failed build or push applies nothing.

  sless deploy -f config/samples/functions --registry 127.0.0.1:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" || regy == "" {
				return usageError{fmt.Errorf("deploy needs -f FILE|DIR and --registry (or $SLESS_REGISTRY)")}
			}
			fns, err := deploy.Load(file, namespace)
			if err != nil {
				return err
			}
			b, err := images.builder(cmd)
			if err != nil {
				return err
			}
			c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			deployed, err := deploy.Run(cmd.Context(), fns, deploy.Options{Registry: regy, Builder: b, Client: c, Progress: cmd.ErrOrStderr()})
			for _, d := range deployed {
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s\t%s\n", d.Namespace, d.Name, d.Image)
			}
			return err
		},
	}
	f := cmd.Flags()
	images.add(f)
	f.StringVarP(&file, "file", "f", "", "a manifest file or a directory of them")
	f.StringVar(&regy, "registry", os.Getenv("SLESS_REGISTRY"), "push images to REGISTRY/<namespace>/<name> (default $SLESS_REGISTRY)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVarP(&namespace, "namespace", "n", "", "the namespace of Functions whose manifest names none (default \"default\")")
	return cmd
}

// kubeClient is a client of the cluster of kubeconfig (or the default
// loading rules) that knows Functions.
func kubeClient(kubeconfig string) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}
