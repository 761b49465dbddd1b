package activator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/internal/wire"
)

// AutoscalerClient tells a remote autoscaler what the activator sees: a
// poke (wire.PokePath) the moment a request waits for a function with no
// instance, and every second one report of the requests waiting for every
// function (wire.BufferedPath), as Knative's activator sends its stats in
// batches. Pokes are queued (bounded; repeated pokes for a function already
// queued merge) and sent by one goroutine, so the request path never waits
// on the network.
type AutoscalerClient struct {
	BaseURL string
	// ID names this activator to the autoscaler, which adds up the counts
	// of several: its pod's name.
	ID     string
	Client *http.Client
	Log    *slog.Logger

	mu      sync.Mutex
	queued  map[types.NamespacedName]bool
	pending chan types.NamespacedName
	once    sync.Once
}

// maxQueuedPokes bounds the functions waiting to be poked.
const maxQueuedPokes = 1024

// Poke queues a poke for the function; it never blocks.
func (p *AutoscalerClient) Poke(namespace, name string) {
	p.once.Do(p.init)
	key := types.NamespacedName{Namespace: namespace, Name: name}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queued[key] {
		return
	}
	select {
	case p.pending <- key:
		p.queued[key] = true
	default:
		p.Log.Warn("poke queue full, dropping a poke", "namespace", namespace, "function", name)
	}
}

func (p *AutoscalerClient) init() {
	p.queued = map[types.NamespacedName]bool{}
	p.pending = make(chan types.NamespacedName, maxQueuedPokes)
	if p.Client == nil {
		p.Client = &http.Client{Timeout: 2 * time.Second}
	}
}

// Run sends queued pokes until ctx ends.
func (p *AutoscalerClient) Run(ctx context.Context) {
	p.once.Do(p.init)
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-p.pending:
			p.mu.Lock()
			delete(p.queued, key)
			p.mu.Unlock()
			p.send(ctx, key.Namespace, key.Name)
		}
	}
}

func (p *AutoscalerClient) send(ctx context.Context, namespace, name string) {
	p.post(ctx, wire.PokePath, wire.Poke{Namespace: namespace, Name: name},
		slog.String("namespace", namespace), slog.String("function", name))
}

// post sends v as JSON to path, logging a failure with about.
func (p *AutoscalerClient) post(ctx context.Context, path string, v any, about ...any) {
	body, err := json.Marshal(v)
	if err != nil {
		p.Log.Error("autoscaler request", "path", path, "err", err)
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		p.Log.Error("autoscaler request", "path", path, "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.Client.Do(req)
	if err != nil {
		p.Log.Warn("autoscaler request failed", append([]any{"path", path, "err", err}, about...)...)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		// The answer says why ({"error": ...}), naming the functions the
		// autoscaler does not know; bounded, as the connection is kept.
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		p.Log.Warn("autoscaler refused", append([]any{"path", path, "status", resp.Status, "answer", strings.TrimSpace(string(msg))}, about...)...)
	}
}

// maxRefusalBytes bounds the part of a refusal's answer logged.
const maxRefusalBytes = 1 << 10

// Scaling reads what the autoscaler knows of every function
// (wire.ScalingPath), for the admin API's views.
func (p *AutoscalerClient) Scaling(ctx context.Context) ([]wire.Scaling, error) {
	p.once.Do(p.init)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.BaseURL, "/")+wire.ScalingPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("autoscaler: GET %s: %s", wire.ScalingPath, resp.Status)
	}
	var out []wire.Scaling
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxScalingBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("autoscaler: GET %s: %w", wire.ScalingPath, err)
	}
	return out, nil
}

// BufferedSource is what ReportBuffered reads: the requests waiting per
// function.
type BufferedSource interface {
	Buffered() map[types.NamespacedName]int
}

// ReportBuffered sends the requests waiting for every function every
// interval until ctx ends, one report (wire.BufferedReport) an interval:
// each function with requests waiting, and once more with 0 when they are
// gone. Above wire.MaxBufferedBatch functions it sends several.
func (p *AutoscalerClient) ReportBuffered(ctx context.Context, src BufferedSource, interval time.Duration) {
	p.once.Do(p.init)
	ReportBuffered(ctx, src, interval, func(counts []wire.BufferedCount) {
		for batch := range slices.Chunk(counts, wire.MaxBufferedBatch) {
			p.post(ctx, wire.BufferedPath, wire.BufferedReport{Activator: p.ID, Functions: batch},
				slog.Int("functions", len(batch)))
		}
	})
}

// ReportBuffered reads src every interval until ctx ends and reports, in
// one call an interval, each function with requests waiting, and once
// more with 0 when they are gone (nothing when no function is either): how
// an autoscaler learns the activator's buffered load, over the network or
// in process. The counts are ordered by namespace and name.
func ReportBuffered(ctx context.Context, src BufferedSource, interval time.Duration, report func([]wire.BufferedCount)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last map[types.NamespacedName]int
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := src.Buffered()
		if counts := countsToReport(now, last); len(counts) > 0 {
			report(counts)
		}
		last = now
	}
}

// countsToReport lists the functions of now with their counts, and those
// of last no longer in now with 0.
func countsToReport(now, last map[types.NamespacedName]int) []wire.BufferedCount {
	counts := make([]wire.BufferedCount, 0, len(now))
	add := func(key types.NamespacedName, n int) {
		counts = append(counts, wire.BufferedCount{Namespace: key.Namespace, Name: key.Name, Count: n})
	}
	for key, n := range now {
		add(key, n)
	}
	for key := range last {
		if _, still := now[key]; !still {
			add(key, 0)
		}
	}
	slices.SortFunc(counts, func(a, b wire.BufferedCount) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return counts
}
