package activator

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// HTTPPoker pokes a remote autoscaler: POST {"namespace","name"} to URL.
// Pokes are queued (bounded: repeated pokes for a function already queued
// merge) and sent by one goroutine, so the request path never waits on
// the network.
type HTTPPoker struct {
	URL    string
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
func (p *HTTPPoker) Poke(namespace, name string) {
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

func (p *HTTPPoker) init() {
	p.queued = map[[2]string]bool{}
	p.pending = make(chan [2]string, maxQueuedPokes)
	if p.Client == nil {
		p.Client = &http.Client{Timeout: 2 * time.Second}
	}
}

// Run sends queued pokes until ctx ends.
func (p *HTTPPoker) Run(ctx context.Context) {
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

func (p *HTTPPoker) send(ctx context.Context, namespace, name string) {
	body, _ := json.Marshal(map[string]string{"namespace": namespace, "name": name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		p.Log.Error("poke", "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.Client.Do(req)
	if err != nil {
		p.Log.Warn("poke failed", "namespace", namespace, "function", name, "err", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		p.Log.Warn("poke refused", "namespace", namespace, "function", name, "status", resp.Status)
	}
}
