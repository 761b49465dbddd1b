package main

import (
	"k8s.io/client-go/rest"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// kubeConfig is the components' Kubernetes client configuration: the
// in-cluster one, or KUBECONFIG's. It has no client-side rate limit
// (controller-runtime's default, QPS −1): the API server's priority and
// fairness is the limit, so that no component waits on its own client
// however many Functions it serves (docs/scale.md). The client's request
// and rate-limiter latencies are among controller-runtime's metrics,
// served by the controller and the autoscaler: a wait there is a
// regression.
func kubeConfig() (*rest.Config, error) {
	ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency, ctrlmetrics.MetricRateLimiterLatency)
	return ctrlconfig.GetConfig()
}
