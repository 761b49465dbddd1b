package autoscaler

import (
	"context"
	"time"

	"sless.dev/sless/autoscaler/kpa"
)

// httpSignal is the demand of requests: what the function's instances
// hold, scraped from their queue-proxies each second, plus what waits in
// activators (buffered.go, and pokes), averaged by the KPA (package kpa)
// over its windows. It is not a Signal: its decision also says whether the
// function panics, and there is none without data. It is the state's own,
// guarded by the state's mu: a lock of its own, taken beside that one per
// function per tick, cost a fifth more CPU a tick at 10,000 functions.
type httpSignal struct {
	decider *kpa.Decider
	// scrapeFailing and noData are logged when they start and end, not
	// every second.
	scrapeFailing, noData bool
}

// reset starts a new decider: history is per setting.
func (h *httpSignal) reset(spec kpa.Spec, now time.Time) {
	h.decider = kpa.NewDecider(spec, now)
}

// observed records the load of a scrape at now, or notes that it failed
// (err), and reports whether the scrape before failed.
func (h *httpSignal) observed(now time.Time, load float64, err error) (wasFailing bool) {
	wasFailing, h.scrapeFailing = h.scrapeFailing, err != nil
	if err == nil {
		h.decider.Record(now, load)
	}
	return wasFailing
}

// decide is the KPA's decision, and whether the one before had no data.
func (h *httpSignal) decide(now time.Time, ready int32) (d kpa.Decision, ok, hadNoData bool) {
	d, ok = h.decider.Decide(now, ready)
	hadNoData, h.noData = h.noData, !ok
	return d, ok, hadNoData
}

// observeHTTP scrapes the function's instances and records their load with
// the requests buffered for it, and returns the settings it observed with.
// A failed scrape records nothing. The scrape is made without the lock; a
// function with no ready instance, most of a large fleet, has nothing to
// scrape and takes the lock once (a second hold cost a tenth more CPU a
// tick at 10,000 functions at zero).
func (a *Autoscaler) observeHTTP(ctx context.Context, now time.Time, st *state) (fn *Target) {
	var (
		obs Observation
		err error
	)
	st.mu.Lock()
	fn, admins := st.fn, st.admins
	if len(admins) > 0 {
		st.mu.Unlock()
		obs, err = a.scraper.Scrape(ctx, admins)
		st.mu.Lock()
	}
	load := obs.Concurrency
	if fn.Metric == MetricRPS {
		load = obs.RPS
	}
	was := st.http.observed(now, load+st.buffered.at(now), err)
	st.mu.Unlock()
	switch {
	case err != nil && !was:
		a.log.Warn("scrape failed: no load recorded until it works", "namespace", fn.Namespace, "function", fn.Name, "err", err)
	case err == nil && was:
		a.log.Info("scrape works again", "namespace", fn.Namespace, "function", fn.Name)
	}
	return fn
}

// decideHTTP is the KPA's decision on the load recorded, given the ready
// instances. Without any load recorded in a whole stable window (every
// scrape failed) there is none: the function keeps its scale, the skip is
// counted, and its start and end are logged. Called with st.mu held.
func (a *Autoscaler) decideHTTP(now time.Time, st *state, ready int32) (kpa.Decision, bool) {
	d, ok, hadNoData := st.http.decide(now, ready)
	fn := st.fn
	switch {
	case !ok && !hadNoData:
		a.log.Warn("no load observed for a whole stable window: keeping the current scale",
			"namespace", fn.Namespace, "function", fn.Name, "desired", st.desired)
	case ok && hadNoData:
		a.log.Info("load observed again: deciding", "namespace", fn.Namespace, "function", fn.Name)
	}
	if !ok {
		// Looked up here, not kept with the gauges: rare, and a series a
		// function would otherwise carry for ever.
		a.metrics.noData.WithLabelValues(fn.Namespace, fn.Name).Inc()
	}
	return d, ok
}

// Poke decides for one function at once: a request is waiting for it.
func (a *Autoscaler) Poke(ctx context.Context, now time.Time, namespace, name string, buffered int) {
	st := a.get(namespace, name)
	if st == nil {
		return
	}
	// The poke counts for this decision only: the buffered count is the
	// activators' to report, and they report nothing (not even 0) for
	// requests served within a second, so a stored poke would keep the
	// function up for good.
	st.mu.Lock()
	st.http.decider.Record(now, max(st.buffered.at(now), float64(buffered)))
	st.waitingLocked(now)
	st.mu.Unlock()
	a.decide(ctx, now, st)
}
