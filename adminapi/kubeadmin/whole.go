package kubeadmin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/runs"
	"sless.dev/sless/timeline"
)

// SnapshotRoute is where an activator's admin API serves its own timeline
// to its peers, behind the admin token.
const SnapshotRoute = "/v1/activator/timeline"

// Defaults of a Whole.
const (
	DefaultViewFor     = time.Second
	DefaultPeerTimeout = 2 * time.Second
	maxSnapshotBytes   = 64 << 20
)

// Whole is the timeline of every activator behind the Service. Each
// activator sees only the invocations that passed through it, and the
// Service sends each admin request to any one of them; so the one that
// answers asks its peers for their Snapshot and merges them with its own:
// one view, whichever answers. A merged view serves for ViewFor, so a
// console's polls cost the peers one snapshot a second at most; a peer
// that does not answer within PeerTimeout is left out and logged.
type Whole struct {
	Local *timeline.Timeline
	// Peers lists the admin addresses (host:port) of the other ready
	// activators; nil when this one is alone.
	Peers func() []string
	// Token is the admin token of the moment, sent to the peers.
	Token  func() string
	Client *http.Client
	Log    *slog.Logger
	// ViewFor and PeerTimeout default to DefaultViewFor and
	// DefaultPeerTimeout.
	ViewFor, PeerTimeout time.Duration

	mu   sync.Mutex // held while a view is made, so concurrent requests share it
	view *timeline.Timeline
	at   time.Time
}

// View is the merged timeline, made at most ViewFor ago.
func (w *Whole) View(ctx context.Context) *timeline.Timeline {
	var peers []string
	if w.Peers != nil {
		peers = w.Peers()
	}
	if len(peers) == 0 {
		return w.Local
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.view != nil && now.Sub(w.at) < cmp.Or(w.ViewFor, DefaultViewFor) {
		return w.view
	}
	view := timeline.New()
	view.Merge(now, w.Local.Snapshot(now))
	for _, s := range w.fetchAll(ctx, peers) {
		view.Merge(now, s)
	}
	w.view, w.at = view, now
	return view
}

// fetchAll asks every peer at once for its snapshot.
func (w *Whole) fetchAll(ctx context.Context, peers []string) []timeline.Snapshot {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(w.PeerTimeout, DefaultPeerTimeout))
	defer cancel()
	out := make([]timeline.Snapshot, len(peers))
	var wg sync.WaitGroup
	for i, addr := range peers {
		wg.Go(func() {
			s, err := w.fetch(ctx, addr)
			if err != nil {
				w.Log.Warn("the admin view leaves out a peer activator", "peer", addr, "err", err)
				return
			}
			out[i] = s
		})
	}
	wg.Wait()
	return out
}

func (w *Whole) fetch(ctx context.Context, addr string) (timeline.Snapshot, error) {
	var s timeline.Snapshot
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+SnapshotRoute, nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("Authorization", "Bearer "+w.Token())
	resp, err := w.Client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", SnapshotRoute, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, maxSnapshotBytes)).Decode(&s); err != nil {
		return s, fmt.Errorf("GET %s: %w", SnapshotRoute, err)
	}
	return s, nil
}

// Handler serves the admin API of the cluster (b's) with the timeline of
// every activator and the runs of store (nil: the activator keeps none),
// and this activator's own snapshot to its peers on SnapshotRoute.
func Handler(b *Backend, w *Whole, store runs.Store) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+SnapshotRoute, func(rw http.ResponseWriter, r *http.Request) {
		httpjson.Write(rw, http.StatusOK, w.Local.Snapshot(time.Now()))
	})
	mux.Handle("/", adminapi.NewMux(b, w.View, store))
	return mux
}
