package autoscaler

import (
	"slices"
	"time"
)

// BufferedTTL is how long an activator's count of waiting requests counts
// without a new report. Activators report every second while requests
// wait (and 0 once they are gone); one that stops, gone or cut off, has
// its count expire instead of holding the function up.
const BufferedTTL = 3 * time.Second

// bufferedSignal is the requests of a function waiting in activators: part
// of its HTTP load (http.go), since they are requests its instances would
// hold if they could. With several activators each holds part of the
// demand: the load is the sum of their counts younger than BufferedTTL.
// Like the HTTP signal it is guarded by its state's mu: read in the same
// hold that records the load, a lock of its own cost a tenth more CPU a
// tick at 10,000 functions at zero (BenchmarkStep10k).
type bufferedSignal struct {
	reports []report // one per activator with requests waiting
}

// report is one activator's latest count of a function's waiting
// requests. A function has a report per activator that has requests of it
// waiting: a few, so a slice searched in full beats a map.
type report struct {
	activator string
	n         int
	at        time.Time
}

// SetBuffered records how many of a function's requests wait in the
// activator named activator, at now.
func (a *Autoscaler) SetBuffered(now time.Time, activator, namespace, name string, n int) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.buffered.set(now, activator, n)
	if n > 0 {
		st.waitingLocked(now)
	}
}

// set records an activator's count. Called with its state's mu held.
func (b *bufferedSignal) set(now time.Time, activator string, n int) {
	i := slices.IndexFunc(b.reports, func(r report) bool { return r.activator == activator })
	switch {
	case n == 0 && i >= 0:
		b.reports = slices.Delete(b.reports, i, i+1)
	case n == 0:
	case i >= 0:
		b.reports[i].n, b.reports[i].at = n, now
	default:
		b.reports = append(b.reports, report{activator: activator, n: n, at: now})
	}
}

// at sums the activators' counts that have not expired at now, dropping
// those that have. Called with its state's mu held.
func (b *bufferedSignal) at(now time.Time) float64 {
	var sum int
	for i := 0; i < len(b.reports); {
		if r := b.reports[i]; now.Sub(r.at) < BufferedTTL {
			sum += r.n
			i++
			continue
		}
		b.reports = slices.Delete(b.reports, i, i+1)
	}
	return float64(sum)
}
