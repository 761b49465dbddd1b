package autoscaler

import "github.com/prometheus/client_golang/prometheus"

// metrics are the autoscaler's series per function: what it asked for,
// what was ready, and whether it was panicking, at the last decision.
type metrics struct {
	desired, actual, panic *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "function"}
	m := &metrics{
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_desired_replicas", Help: "Instances the autoscaler last asked for.",
		}, labels),
		actual: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_actual_replicas", Help: "Instances ready at the last decision.",
		}, labels),
		panic: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sless_autoscaler_panic_mode", Help: "1 while the function is in panic mode.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.desired, m.actual, m.panic} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) decided(namespace, name string, desired, ready int32, panicking bool) {
	m.desired.WithLabelValues(namespace, name).Set(float64(desired))
	m.actual.WithLabelValues(namespace, name).Set(float64(ready))
	p := 0.0
	if panicking {
		p = 1
	}
	m.panic.WithLabelValues(namespace, name).Set(p)
}

func (m *metrics) forget(namespace, name string) {
	for _, g := range []*prometheus.GaugeVec{m.desired, m.actual, m.panic} {
		g.DeleteLabelValues(namespace, name)
	}
}
