package activator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"sless.dev/sless/internal/wire"
)

// AutoscalerClient tells a remote autoscaler what the activator sees:
// pokes (POST BaseURL/v1/poke {"namespace","name"}) the moment a request
// waits for a function with no instance, and the requests waiting per
// function every second (POST BaseURL/v1/buffered {"namespace","name",
// "count","activator"}). Pokes are queued (bounded; repeated pokes for a
// function already queued merge) and sent by one goroutine, so the request
// path never waits on the network.
type AutoscalerClient struct {
	BaseURL string
	// ID names this activator to the autoscaler, which adds up the counts
	// of several: its pod's name.
	ID     string
	Client *http.Client
	Log    *slog.Logger

	mu      sync.Mutex
	queued  map[[2]string]bool
	pending chan [2]string
	once    sync.Once
}

// maxQueuedPokes bounds the functions waiting to be poked.
const maxQueuedPokes = 1024

// Poke queues a poke for the function; it never blocks.
func (p *AutoscalerClient) Poke(namespace, name string) {
	p.once.Do(p.init)
	key := [2]string{namespace, name}
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
	p.queued = map[[2]string]bool{}
	p.pending = make(chan [2]string, maxQueuedPokes)
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
			p.send(ctx, key[0], key[1])
		}
	}
}

func (p *AutoscalerClient) send(ctx context.Context, namespace, name string) {
	p.post(ctx, "/v1/poke", map[string]any{"namespace": namespace, "name": name})
}

func (p *AutoscalerClient) post(ctx context.Context, path string, v map[string]any) {
	body, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		p.Log.Error("autoscaler request", "path", path, "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.Client.Do(req)
	if err != nil {
		p.Log.Warn("autoscaler request failed", "path", path, "namespace", v["namespace"], "function", v["name"], "err", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		p.Log.Warn("autoscaler refused", "path", path, "namespace", v["namespace"], "function", v["name"], "status", resp.Status)
	}
}

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
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxScalingBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("autoscaler: GET %s: %w", wire.ScalingPath, err)
	}
	return out, nil
}

// maxScalingBytes bounds the autoscaler's answer: some 100 bytes a
// function, for a hundred thousand.
const maxScalingBytes = 16 << 20

// BufferedSource is what ReportBuffered reads: the requests waiting per
// "namespace/name".
type BufferedSource interface {
	Buffered() map[string]int
}

// ReportBuffered sends the requests waiting per function every interval
// until ctx ends: each function with requests waiting, and once more with
// 0 when they are gone.
func (p *AutoscalerClient) ReportBuffered(ctx context.Context, src BufferedSource, interval time.Duration) {
	p.once.Do(p.init)
	ReportBuffered(ctx, src, interval, func(namespace, name string, n int) {
		p.post(ctx, "/v1/buffered", map[string]any{"namespace": namespace, "name": name, "count": n, "activator": p.ID})
	})
}

// ReportBuffered reads src every interval until ctx ends and reports each
// function with requests waiting, and once more with 0 when they are
// gone: how an autoscaler learns the activator's buffered load, over the
// network or in process.
func ReportBuffered(ctx context.Context, src BufferedSource, interval time.Duration, report func(namespace, name string, n int)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last map[string]int
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := src.Buffered()
		for key, n := range now {
			ns, name, _ := strings.Cut(key, "/")
			report(ns, name, n)
		}
		for key := range last {
			if _, still := now[key]; !still {
				ns, name, _ := strings.Cut(key, "/")
				report(ns, name, 0)
			}
		}
		last = now
	}
}
