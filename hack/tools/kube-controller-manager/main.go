// Command kube-controller-manager is Kubernetes' controller manager
// (ReplicaSets, garbage collection, EndpointSlices, the HPA), built from the
// k8s.io/kubernetes module for the one-node test cluster (make cluster).
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
