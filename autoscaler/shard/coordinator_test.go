package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"sless.dev/sless/internal/controlplane"
	"sless.dev/sless/internal/eventually"
)

// replica is a Coordinator run for a test.
type replica struct {
	*Coordinator
	cancel  context.CancelFunc
	stopped chan struct{}
	cut     *atomic.Bool // its connection to the API server is cut
}

// start runs a coordinator named name; its Leases last lease.
func start(t *testing.T, cfg *rest.Config, name string, lease time.Duration) *replica {
	t.Helper()
	cut := &atomic.Bool{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, cut} })
	c, err := New(kubernetes.NewForConfigOrDie(cfg), Config{Namespace: "default", Prefix: "test", Buckets: 6,
		Self: Member{Name: name, Push: name + ":8090", GRPC: name + ":9095"}, LeaseDuration: lease, RenewEvery: lease / 5},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{Coordinator: c, cancel: cancel, stopped: make(chan struct{}), cut: cut}
	go func() {
		defer close(r.stopped)
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// stop ends the replica as SIGTERM would: it releases what it holds.
func (r *replica) stop() {
	r.cancel()
	<-r.stopped
}

// held is the buckets it acts on.
func (r *replica) held() []bool { return r.heldNow() }

// TestReplicasShareTheBuckets: against a real API server, one replica
// takes every bucket; a second takes half of them from it, the two never
// acting on one bucket at once; stopped, the second gives its half back
// at once; and a killed replica's half is taken once its Lease lapsed,
// not before.
func TestReplicasShareTheBuckets(t *testing.T) {
	cfg := controlplane.Start(t)
	const lease = 3 * time.Second
	a := start(t, cfg, "a", lease)
	eventually.True(t, "the first replica to take every bucket", func() bool { return a.Held() == 6 })
	if a.Owner("ns", "fn"); !a.Owns("ns", "fn") {
		t.Error("the only replica does not own a function")
	}

	b := start(t, cfg, "b", lease)
	overlap := watchOverlap(t, a, b)
	eventually.True(t, "the two replicas to hold three buckets each", func() bool { return a.Held() == 3 && b.Held() == 3 })
	// a learns who took what from the watch.
	eventually.True(t, "a to know the holder of every bucket", func() bool {
		for i := range 50 {
			if _, ok := a.Owner("ns", fmt.Sprintf("fn-%d", i)); !ok {
				return false
			}
		}
		return true
	})
	for i := range 50 {
		ns, name := "ns", fmt.Sprintf("fn-%d", i)
		if a.Owns(ns, name) == b.Owns(ns, name) {
			t.Fatalf("function %s/%s: owned by a %v, by b %v; want exactly one", ns, name, a.Owns(ns, name), b.Owns(ns, name))
		}
		owner, ok := a.Owner(ns, name)
		want := map[bool]string{true: "a", false: "b"}[a.Owns(ns, name)]
		if !ok || owner.Name != want || owner.Push != want+":8090" || owner.GRPC != want+":9095" {
			t.Fatalf("a says %s/%s is %+v (%v), want %s and its addresses", ns, name, owner, ok, want)
		}
	}
	if peers := a.Peers(); len(peers) != 1 || peers[0].Name != "b" {
		t.Errorf("a's peers: %+v, want b", peers)
	}

	b.stop()
	eventually.True(t, "a to take b's buckets back once b released them", func() bool { return a.Held() == 6 })

	c := start(t, cfg, "c", lease)
	eventually.True(t, "a and c to share", func() bool { return a.Held() == 3 && c.Held() == 3 })
	overlap.stop()
	overlap = watchOverlap(t, a, c)
	// Cut off from the API server, c can neither renew nor release: it
	// stops acting on its own, and a takes its buckets once c's Lease
	// lapsed; the watch above fails the test if c still acted then.
	c.cut.Store(true)
	eventually.TrueWithin(t, 10*lease, "c to stop acting, cut off", func() bool { return c.Held() == 0 })
	eventually.TrueWithin(t, 10*lease, "a to take a cut-off replica's buckets", func() bool { return a.Held() == 6 })
	overlap.stop()
}

// cutTransport fails every request once cut: a network partition, which
// the real API server cannot be made to cause.
type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("cut off from the API server")
	}
	return c.rt.RoundTrip(r)
}

// overlapWatch fails the test if two replicas act on one bucket at once.
type overlapWatch struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func watchOverlap(t *testing.T, x, y *replica) *overlapWatch {
	w := &overlapWatch{done: make(chan struct{})}
	w.wg.Go(func() {
		for {
			select {
			case <-w.done:
				return
			case <-time.After(time.Millisecond):
			}
			hx, hy := x.held(), y.held()
			for b := range hx {
				if hx[b] && hy[b] {
					t.Errorf("bucket %d held by two replicas at once", b)
					return
				}
			}
		}
	})
	return w
}

func (w *overlapWatch) stop() {
	close(w.done)
	w.wg.Wait()
}

// TestGoneReplicaCollected: the member Lease of a replica gone for ten
// lease durations is deleted by a live one; a live member's is not.
func TestGoneReplicaCollected(t *testing.T) {
	cfg := controlplane.Start(t)
	api := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases("default")
	gone := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-member-gone", Labels: map[string]string{kindLabel: kindMember}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gone"), LeaseDurationSeconds: ptr.To(int32(1))},
	}
	if _, err := api.Create(context.Background(), gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := start(t, cfg, "a", 3*time.Second)
	eventually.True(t, "the gone replica's Lease to be deleted", func() bool {
		_, err := api.Get(context.Background(), "test-member-gone", metav1.GetOptions{})
		return err != nil
	})
	if _, err := api.Get(context.Background(), a.memberName(), metav1.GetOptions{}); err != nil {
		t.Errorf("the live replica's own Lease: %v", err)
	}
	a.stop()
	if _, err := api.Get(context.Background(), a.memberName(), metav1.GetOptions{}); err == nil {
		t.Error("a stopped replica left its Lease")
	}
}

// TestOutageKeepsTheShares: both replicas lose the API server for longer
// than a Lease; both stop acting, and once it is back each takes its own
// buckets up again, neither taking the other's for dead, and never two
// acting on one bucket.
func TestOutageKeepsTheShares(t *testing.T) {
	cfg := controlplane.Start(t)
	const lease = 3 * time.Second
	a, b := start(t, cfg, "a", lease), start(t, cfg, "b", lease)
	eventually.True(t, "the two replicas to hold three buckets each", func() bool { return a.Held() == 3 && b.Held() == 3 })
	mine := func(r *replica) []bool { return slices.Clone(r.held()) }
	heldA, heldB := mine(a), mine(b)
	overlap := watchOverlap(t, a, b)
	a.cut.Store(true)
	b.cut.Store(true)
	eventually.TrueWithin(t, 10*lease, "both to stop acting, cut off", func() bool { return a.Held() == 0 && b.Held() == 0 })
	api := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases("default")
	eventually.TrueWithin(t, 10*lease, "the outage to outlast both replicas' Leases", func() bool {
		for _, r := range []*replica{a, b} {
			l, err := api.Get(context.Background(), r.memberName(), metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) < 2*lease {
				return false
			}
		}
		return true
	})
	a.cut.Store(false)
	b.cut.Store(false)
	eventually.TrueWithin(t, 10*lease, "each to take its own buckets up again", func() bool {
		return slices.Equal(a.held(), heldA) && slices.Equal(b.held(), heldB)
	})
	overlap.stop()
	for b, h := range heldA {
		if h && heldB[b] {
			t.Fatalf("bucket %d held by both before the outage", b)
		}
	}
}
