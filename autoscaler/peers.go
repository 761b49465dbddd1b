package autoscaler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"sless.dev/sless/autoscaler/shard"
	"sless.dev/sless/internal/httpjson"
	"sless.dev/sless/internal/wire"
)

// Peers are the other replicas the functions are shared with
// (*shard.Coordinator). Activators push to any replica, through the
// Service; a push for a function another replica scales is passed on to
// it, and what the replicas know of their functions is gathered.
type Peers interface {
	// Owner is the replica that scales the function now; false while
	// none does (its bucket is changing hands).
	Owner(namespace, name string) (shard.Member, bool)
	// Peers are the other live replicas.
	Peers() []shard.Member
}

// WithPeers shares the functions with peers.
func WithPeers(p Peers) Option {
	return func(o *options) { o.peers = p }
}

// ForwardedHeader marks a push or read one replica passed on to another:
// the receiver answers for its own functions only and passes nothing on,
// so that two replicas that disagree for a moment cannot bounce a push
// between them.
const ForwardedHeader = "Sless-Autoscaler-Forwarded"

// peerTimeout bounds a push or read passed on to a peer.
const peerTimeout = 2 * time.Second

// relay passes pushes and reads on to peers.
type relay struct {
	peers  Peers
	client *http.Client
}

func newRelay(p Peers) *relay {
	return &relay{peers: p, client: &http.Client{Timeout: peerTimeout}}
}

// forwarded reports whether r came from a peer (or there are none).
func (rl *relay) forwarded(r *http.Request) bool {
	return rl == nil || r.Header.Get(ForwardedHeader) != ""
}

// post passes a push on to the replica at push (host:port) and returns its
// status and, for a refusal, its answer.
func (rl *relay) post(ctx context.Context, push, path string, v any) (int, string, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+push+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ForwardedHeader, "1")
	resp, err := rl.client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("autoscaler replica %s: %w", push, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

// poke passes a poke for a function scaled elsewhere on to its replica.
func (rl *relay) poke(w http.ResponseWriter, r *http.Request, p wire.Poke) {
	owner, ok := rl.peers.Owner(p.Namespace, p.Name)
	if !ok {
		httpjson.Error(w, http.StatusServiceUnavailable, "no autoscaler replica scales "+p.Namespace+"/"+p.Name+" now: its share is changing hands")
		return
	}
	code, msg, err := rl.post(r.Context(), owner.Push, wire.PokePath, p)
	switch {
	case err != nil:
		httpjson.Error(w, http.StatusBadGateway, err.Error())
	case code >= 300:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, msg)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// buffered passes the counts of functions scaled elsewhere on to their
// replicas, one report each, and returns the functions none took.
func (rl *relay) buffered(ctx context.Context, activator string, counts []wire.BufferedCount) (refused []string) {
	byOwner := map[string][]wire.BufferedCount{}
	for _, c := range counts {
		owner, ok := rl.peers.Owner(c.Namespace, c.Name)
		if !ok {
			refused = append(refused, c.Namespace+"/"+c.Name)
			continue
		}
		byOwner[owner.Push] = append(byOwner[owner.Push], c)
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for push, group := range byOwner {
		wg.Go(func() {
			code, _, err := rl.post(ctx, push, wire.BufferedPath, wire.BufferedReport{Activator: activator, Functions: group})
			if err == nil && code < 300 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range group {
				refused = append(refused, c.Namespace+"/"+c.Name)
			}
		})
	}
	wg.Wait()
	return refused
}

// scaling is what the peers know of their functions, added to local and
// sorted; a peer that does not answer is left out.
func (rl *relay) scaling(ctx context.Context, local []wire.Scaling) []wire.Scaling {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	out := local
	for _, p := range rl.peers.Peers() {
		wg.Go(func() {
			got, err := rl.read(ctx, p.Push)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, got...)
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(x, y wire.Scaling) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	return out
}

func (rl *relay) read(ctx context.Context, push string) ([]wire.Scaling, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+push+wire.ScalingPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(ForwardedHeader, "1")
	resp, err := rl.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("autoscaler replica %s: %s", push, resp.Status)
	}
	var out []wire.Scaling
	err = json.NewDecoder(io.LimitReader(resp.Body, wire.MaxScalingBytes)).Decode(&out)
	return out, err
}
