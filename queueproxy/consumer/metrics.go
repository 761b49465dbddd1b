package consumer

import (
	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/internal/httpmetrics"
)

// Metrics are the consumers' Prometheus series, one set per queue-proxy.
type Metrics struct {
	messages    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	redelivered *prometheus.CounterVec
}

// NewMetrics registers the consumers' series with reg, labelled with the
// function.
func NewMetrics(reg prometheus.Registerer, namespace, function string) (*Metrics, error) {
	labels := prometheus.Labels{"namespace": namespace, "function": function}
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sless_queue_messages_total",
			Help:        "Messages consumed, by how they were settled: acked (the function answered 2xx), retried, dead_lettered, dropped (failed its retries with no dead-letter queue), requeued (returned unsettled) or isolated (in flight when the function crashed with others: sent back to run alone, no attempt spent).",
			ConstLabels: labels,
		}, []string{"queue", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "sless_queue_message_duration_seconds",
			Help:        "Time from a message's delivery to the function's answer, slot wait included.",
			ConstLabels: labels,
			Buckets:     httpmetrics.DurationBuckets,
		}, []string{"queue"}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "sless_queue_redelivered_messages_total",
			Help:        "Messages delivered again after a delivery whose outcome was not acknowledged (a broker restart, an instance stopped): the duplicates at-least-once delivery allows.",
			ConstLabels: labels,
		}, []string{"queue"}),
	}
	for _, c := range []prometheus.Collector{m.messages, m.duration, m.redelivered} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// queueMetrics are one queue's series, resolved once.
type queueMetrics struct {
	byResult    map[string]prometheus.Counter
	requeued    prometheus.Counter
	duration    prometheus.Observer
	redelivered prometheus.Counter
}

func (m *Metrics) forQueue(queue string) queueMetrics {
	q := queueMetrics{byResult: map[string]prometheus.Counter{},
		duration: m.duration.WithLabelValues(queue), redelivered: m.redelivered.WithLabelValues(queue)}
	for _, r := range []string{resultAcked, resultRetried, resultDeadLettered, resultDropped, resultRequeued, resultIsolated} {
		q.byResult[r] = m.messages.WithLabelValues(queue, r)
	}
	q.requeued = q.byResult[resultRequeued]
	return q
}

func (q queueMetrics) count(result string) { q.byResult[result].Inc() }
