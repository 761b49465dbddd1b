package scheduler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
)

// Metrics are the scheduler's series: fires by result, and their lag.
type Metrics struct{ m *metrics }

type metrics struct {
	fires *prometheus.CounterVec
	lag   *prometheus.HistogramVec
}

// NewMetrics registers the scheduler's series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"namespace", "function", "trigger"}
	m := &metrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_cron_fires_total",
			Help: "Cron fires by result: ok, failed (5xx), error (not answered), duplicate (another scheduler sent it), unclaimed (the ledger was unreachable).",
		}, append(labels, "result")),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sless_cron_fire_lag_seconds",
			Help:    "Time from a cron fire's scheduled time to its sending.",
			Buckets: httpmetrics.DurationBuckets,
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.fires, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("scheduler metrics: %w", err)
		}
	}
	return &Metrics{m}, nil
}

func (m *metrics) fire(t *Trigger, result string) {
	m.fires.WithLabelValues(t.Namespace, t.Function, t.Name, result).Inc()
}
