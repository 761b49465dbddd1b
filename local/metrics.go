package local

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"sless.dev/sless/local/supervisor"
)

// metrics are the series of what only the local platform sees: the
// processes it runs and the builds it makes. On Kubernetes the kubelet
// and the image build are where to look (docs/metrics.md).
type metrics struct {
	crashes, prepareFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "function"}
	m := &metrics{
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_instance_crashes_total",
			Help: "Instance processes that exited unasked; each is restarted, after a backoff that grows while they crash before ready.",
		}, labels),
		prepareFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_function_prepare_failures_total",
			Help: "Builds or dependency installs of a function's source that failed.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.crashes, m.prepareFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("local platform metrics: %w", err)
		}
	}
	return m, nil
}

// forget drops a removed function's series.
func (m *metrics) forget(namespace, name string) {
	m.crashes.DeleteLabelValues(namespace, name)
	m.prepareFailures.DeleteLabelValues(namespace, name)
}

// gatherer is the platform's one /metrics page: its own registry (the
// activator, the autoscaler, the Go runtime) and every ready instance's
// queue-proxy series, labelled with the instance as Prometheus labels
// each pod it scrapes on Kubernetes.
type gatherer struct {
	platform  prometheus.Gatherer
	instances func() []supervisor.InstanceMetrics
}

func (g gatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := g.platform.Gather()
	if err != nil {
		return fams, err
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, im := range g.instances() {
		ifams, err := im.Gatherer.Gather()
		if err != nil {
			continue // one instance's trouble must not cost the whole page
		}
		for _, f := range ifams {
			for _, m := range f.Metric {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String("instance"), Value: proto.String(im.Instance)})
				slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return cmp.Compare(a.GetName(), b.GetName()) })
			}
			if have := byName[f.GetName()]; have != nil {
				have.Metric = append(have.Metric, f.Metric...)
				continue
			}
			byName[f.GetName()] = f
			fams = append(fams, f)
		}
	}
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return fams, nil
}
