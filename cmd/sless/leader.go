package main

import (
	"os"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// defaultLeaderNamespace is where the leader election Lease lives outside
// a cluster when the kubeconfig's context names no namespace: where
// config/default installs sless.
const defaultLeaderNamespace = "sless-system"

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderElectionNamespace is the namespace of the Lease: flag when set;
// in a pod, the pod's; outside a cluster, the namespace of the kubeconfig's
// current context (KUBECONFIG, or ~/.kube/config), or sless-system.
func leaderElectionNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	raw, err := clientcmd.NewDefaultClientConfigLoadingRules().Load()
	if err == nil {
		if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil && ctx.Namespace != "" {
			return ctx.Namespace
		}
	}
	return defaultLeaderNamespace
}

// leaderNamespaceUsage is the --leader-election-namespace help line.
const leaderNamespaceUsage = "namespace of the leader election Lease (default: the pod's; outside a cluster the kubeconfig context's, or " +
	defaultLeaderNamespace + ")"
