package timeline

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Merging timelines. Behind a Service each activator sees only the
// invocations that passed through it; the one that answers the admin API
// asks the others for their Snapshot and merges them into a view of the
// whole (adminapi/kubeadmin), as Prometheus would sum their counters.

// Snapshot is a timeline's steps within its Span, as it sends them to a
// peer: the steps with something in them, of every function it knows.
type Snapshot struct {
	Functions []FunctionSteps `json:"functions"`
}

// FunctionSteps are one function's non-empty steps.
type FunctionSteps struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Steps     []StepCount `json:"steps"`
}

// StepCount is one step: At is the step's index since the epoch (its start
// over Step); Latency counts requests by duration bucket.
type StepCount struct {
	At         int64    `json:"at"`
	Requests   uint32   `json:"requests,omitempty"`
	Errors     uint32   `json:"errors,omitempty"`
	ColdStarts uint32   `json:"coldStarts,omitempty"`
	Latency    []uint32 `json:"latency,omitempty"`
	Sampled    bool     `json:"sampled,omitempty"`
	Desired    int32    `json:"desired,omitempty"`
	Ready      int32    `json:"ready,omitempty"`
	Buffered   int32    `json:"buffered,omitempty"`
	QueueDepth int64    `json:"queueDepth,omitempty"`
}

// Snapshot copies the steps of the Span ending at now.
func (t *Timeline) Snapshot(now time.Time) Snapshot {
	t.mu.RLock()
	keys := make([]types.NamespacedName, 0, len(t.fns))
	fns := make([]*function, 0, len(t.fns))
	for k, f := range t.fns {
		keys, fns = append(keys, k), append(fns, f)
	}
	t.mu.RUnlock()
	first := stepOf(now) - int64(slots) + 1
	out := Snapshot{Functions: make([]FunctionSteps, 0, len(fns))}
	for i, f := range fns {
		fs := FunctionSteps{Namespace: keys[i].Namespace, Name: keys[i].Name}
		f.mu.Lock()
		for j := first; j < first+int64(slots); j++ {
			if s := f.view(j); s.requests > 0 || s.sampled {
				fs.Steps = append(fs.Steps, s.count())
			}
		}
		f.mu.Unlock()
		out.Functions = append(out.Functions, fs)
	}
	return out
}

func (s *slot) count() StepCount {
	c := StepCount{At: s.at, Requests: s.requests, Errors: s.errors, ColdStarts: s.coldStarts, Sampled: s.sampled,
		Desired: s.desired, Ready: s.ready, Buffered: s.buffered, QueueDepth: s.queueDepth}
	if s.requests > 0 {
		c.Latency = append([]uint32(nil), s.latency[:]...)
	}
	return c
}

// Merge adds a snapshot's steps to t, adding the functions t does not
// know: invocations add up, and so do requests buffered (each activator
// holds its own); instances and queue depth are the cluster's, which
// every activator samples alike, so the larger is kept. Steps older than
// t's Span at now, and latencies with more buckets than t's, are left out.
func (t *Timeline) Merge(now time.Time, s Snapshot) {
	first := stepOf(now) - int64(slots) + 1
	for _, fs := range s.Functions {
		f := t.track(types.NamespacedName{Namespace: fs.Namespace, Name: fs.Name})
		f.mu.Lock()
		for _, c := range fs.Steps {
			if c.At < first || len(c.Latency) > len(counts{}) {
				continue
			}
			if c.zero() && f.sampledZero(c.At) {
				continue
			}
			if !c.zero() {
				f.active = max(f.active, c.At)
			}
			if sl := f.at(c.At); sl != nil {
				sl.merge(c)
			}
		}
		f.mu.Unlock()
	}
}

// zero says whether c is a step sampled all zeros, without requests.
func (c *StepCount) zero() bool {
	return c.Sampled && c.Requests == 0 && c.Desired == 0 && c.Ready == 0 && c.Buffered == 0 && c.QueueDepth == 0
}

func (s *slot) merge(c StepCount) {
	s.requests += c.Requests
	s.errors += c.Errors
	s.coldStarts += c.ColdStarts
	for i, n := range c.Latency {
		s.latency[i] += n
	}
	if !c.Sampled {
		return
	}
	if !s.sampled {
		s.sampled, s.buffered = true, 0
	}
	s.desired, s.ready, s.queueDepth = max(s.desired, c.Desired), max(s.ready, c.Ready), max(s.queueDepth, c.QueueDepth)
	s.buffered += c.Buffered
}
