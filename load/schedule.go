package load

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Step is one part of an open-loop schedule: the rate goes from From to To
// requests per second, linearly, over For.
type Step struct {
	From, To float64
	For      time.Duration
}

// ParseSteps reads a rate: "500" (a fixed rate, for the run's duration),
// or steps "from:to:duration,...", such as "0:500:30s,500:500:60s" (a ramp
// from zero to 500 per second over 30 s, then 500 per second for a
// minute).
func ParseSteps(spec string) (steps []Step, fixed bool, err error) {
	if r, err := strconv.ParseFloat(spec, 64); err == nil {
		if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, false, fmt.Errorf("rate %q: want a positive number of requests per second", spec)
		}
		return []Step{{From: r, To: r}}, true, nil
	}
	for part := range strings.SplitSeq(spec, ",") {
		s, err := parseStep(part)
		if err != nil {
			return nil, false, fmt.Errorf("rate %q: %w", spec, err)
		}
		steps = append(steps, s)
	}
	return steps, false, nil
}

func parseStep(part string) (Step, error) {
	f := strings.Split(part, ":")
	if len(f) != 3 {
		return Step{}, fmt.Errorf("step %q: want from:to:duration, as 0:500:30s", part)
	}
	from, err1 := strconv.ParseFloat(f[0], 64)
	to, err2 := strconv.ParseFloat(f[1], 64)
	d, err3 := time.ParseDuration(f[2])
	switch {
	case err1 != nil || err2 != nil || from < 0 || to < 0 || math.IsInf(from+to, 0) || math.IsNaN(from+to):
		return Step{}, fmt.Errorf("step %q: the rates must be numbers of requests per second, 0 or more", part)
	case err3 != nil || d <= 0:
		return Step{}, fmt.Errorf("step %q: %q is not a positive duration (30s, 1m)", part, f[2])
	case from == 0 && to == 0:
		return Step{}, fmt.Errorf("step %q: sends nothing", part)
	}
	return Step{From: from, To: to, For: d}, nil
}

// schedule gives each request of an open-loop run its intended send time:
// the k-th request (from 0) is due when the rate's integral reaches k.
type schedule struct {
	steps []Step
	// before[i] is the requests due before step i starts.
	before []float64
	end    time.Duration
}

func newSchedule(steps []Step) (*schedule, error) {
	if len(steps) == 0 {
		return nil, errors.New("no steps")
	}
	s := &schedule{steps: steps, before: make([]float64, len(steps))}
	n := 0.0
	for i, st := range steps {
		s.before[i] = n
		n += (st.From + st.To) / 2 * st.For.Seconds()
		s.end += st.For
	}
	return s, nil
}

// at is when request k is due, from the run's start; ok is false past the
// schedule's end.
func (s *schedule) at(k int64) (d time.Duration, ok bool) {
	offset := time.Duration(0)
	for i, st := range s.steps {
		n := float64(k) - s.before[i] // requests into this step
		total := (st.From + st.To) / 2 * st.For.Seconds()
		if n < total {
			return offset + time.Duration(stepTime(st, n)*float64(time.Second)), true
		}
		offset += st.For
	}
	return 0, false
}

// stepTime solves, within a step, for the time t (seconds) when n requests
// are due: n = a t + (b-a) t² / 2D.
func stepTime(st Step, n float64) float64 {
	a, b, d := st.From, st.To, st.For.Seconds()
	if a == b {
		return n / a
	}
	slope := (b - a) / d
	// slope/2 t² + a t - n = 0, the positive root.
	return (-a + math.Sqrt(a*a+2*slope*n)) / slope
}
