package httpmetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCodeCounters(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "answers_total"}, []string{"code"})
	c := NewCodeCounters(vec)
	for _, code := range []int{200, 200, 404, 418, 599, 200} {
		c.Inc(code)
	}
	for code, want := range map[string]float64{"200": 3, "404": 1, "418": 1, "599": 1} {
		if got := testutil.ToFloat64(vec.WithLabelValues(code)); got != want {
			t.Errorf("code %s counted %v, want %v", code, got, want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { c.Inc(200) }); allocs != 0 {
		t.Errorf("counting a common code allocates %.0f times", allocs)
	}
}
