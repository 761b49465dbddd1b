package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"sless.dev/sless/internal/cachetrim"
)

// Member is a replica as its peers reach it.
type Member struct {
	// Name is unique among the replicas: the pod's name.
	Name string
	// Push is the host:port it takes activators' pushes on; GRPC, that of
	// its KEDA external scaler.
	Push, GRPC string
}

// Config sets up a Coordinator.
type Config struct {
	// Namespace holds the Leases; Prefix starts their names.
	Namespace, Prefix string
	// Buckets is the number of buckets, the same for every replica.
	Buckets int
	Self    Member
	// LeaseDuration is how long a replica that stopped renewing counts as
	// live: its buckets move after it. Every RenewEvery it renews.
	LeaseDuration, RenewEvery time.Duration
}

// DefaultPrefix starts the names of `sless autoscaler`'s Leases.
const DefaultPrefix = "sless-autoscaler"

// The defaults of Config: a replica that dies is replaced on its buckets
// within LeaseDuration and a step, under 15 s.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewEvery    = 2 * time.Second
)

// The Leases' label, whose value says which kind each is, and the
// annotations of a member's addresses.
const (
	kindLabel        = "sless.dev/autoscaler-shard"
	kindMember       = "member"
	kindBucket       = "bucket"
	pushAnnotation   = "sless.dev/push-address"
	grpcAnnotation   = "sless.dev/grpc-address"
	bucketsAnnoation = "sless.dev/buckets"
)

// Coordinator keeps this replica's share of the buckets: it announces the
// replica, deals the buckets among the live ones, takes the Leases of the
// buckets dealt to it once they are free (released, or their holder no
// longer live) and releases those dealt to another. Owns and Owner read a
// snapshot, without a lock.
type Coordinator struct {
	cfg    Config
	client kubernetes.Interface
	leases coordinationlisters.LeaseNamespaceLister
	inf    toolscache.SharedIndexInformer
	// buckets reads the bucket Leases from the watch, or as this replica
	// last wrote them when the watch has not caught up: a step right
	// after a write must not take its own old copy for the truth.
	buckets toolscache.MutationCache
	log     *slog.Logger
	// OnChange, when set before Run, is called after the buckets this
	// replica acts on changed, before any of them is released: the
	// functions of buckets it lost must be dropped when it returns.
	OnChange func()

	view    atomic.Pointer[view]
	poke    chan struct{}
	renewed time.Time // the last renewal of the member Lease
	self    *coordinationv1.Lease
	// seen is when each member Lease was last seen to change, by this
	// replica's clock: liveness is judged by it, not by the holder's
	// renewTime, so that clocks need not agree.
	seen   map[string]sighting
	cutOff bool       // the last renewal failed
	mu     sync.Mutex // held by step and leave, which write the Leases
}

type sighting struct {
	version string
	at      time.Time
}

// view is what Owns and Owner read, replaced whole.
type view struct {
	held    []bool            // by bucket: this replica acts on it until
	until   time.Time         // the renewal deadline: after it, on none
	holders []string          // by bucket: the Lease's holder, "" for none
	members map[string]Member // the live members, by name
	synced  bool              // a step has run
}

// New returns a coordinator of the Leases in cfg.Namespace, with defaults
// for the zero durations and bucket count.
func New(client kubernetes.Interface, cfg Config, log *slog.Logger) (*Coordinator, error) {
	cfg.Buckets = cmp.Or(cfg.Buckets, DefaultBuckets)
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.RenewEvery = cmp.Or(cfg.RenewEvery, DefaultRenewEvery)
	switch {
	case cfg.Self.Name == "":
		return nil, errors.New("shard: the replica needs a name")
	case cfg.RenewEvery*3 > cfg.LeaseDuration:
		return nil, fmt.Errorf("shard: renewing every %v leaves under three tries in a lease of %v", cfg.RenewEvery, cfg.LeaseDuration)
	}
	c := &Coordinator{cfg: cfg, client: client, log: log, poke: make(chan struct{}, 1), seen: map[string]sighting{}}
	if errs := validation.IsDNS1123Subdomain(c.memberName()); len(errs) > 0 {
		return nil, fmt.Errorf("shard: replica name %q makes the Lease name %q: %s", cfg.Self.Name, c.memberName(), strings.Join(errs, "; "))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kindLabel }))
	leases := factory.Coordination().V1().Leases()
	c.inf, c.leases = leases.Informer(), leases.Lister().Leases(cfg.Namespace)
	if err := c.inf.SetTransform(cachetrim.Transform); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	c.buckets = toolscache.NewIntegerResourceVersionMutationCacheWithOptions(logr.FromSlogHandler(log.Handler()), c.inf.GetStore(),
		toolscache.MutationCacheOptions{IncludeAdds: true, TTL: time.Minute})
	c.view.Store(&view{held: make([]bool, cfg.Buckets), holders: make([]string, cfg.Buckets)})
	return c, nil
}

// Buckets is the number of buckets.
func (c *Coordinator) Buckets() int { return c.cfg.Buckets }

// Owns reports whether this replica acts on the function now. It is
// false past the renewal deadline even when the loop that renews has not
// run since (stalled), before any other replica may take the function.
func (c *Coordinator) Owns(namespace, name string) bool {
	v := c.view.Load()
	return v.held[Bucket(namespace, name, c.cfg.Buckets)] && time.Now().Before(v.until)
}

// Owner is the replica that holds the function's bucket; false while none
// does (it is changing hands) or its holder is not live.
func (c *Coordinator) Owner(namespace, name string) (Member, bool) {
	v := c.view.Load()
	m, ok := v.members[v.holders[Bucket(namespace, name, c.cfg.Buckets)]]
	return m, ok
}

// Peers are the other live replicas.
func (c *Coordinator) Peers() []Member {
	v := c.view.Load()
	var out []Member
	for name, m := range v.members {
		if name != c.cfg.Self.Name {
			out = append(out, m)
		}
	}
	return out
}

// Synced reports whether the replica has taken its first share (possibly
// none): until then Owns is false for every function.
func (c *Coordinator) Synced() bool { return c.view.Load().synced }

// Held is the number of buckets this replica acts on.
func (c *Coordinator) Held() int {
	n := 0
	for _, h := range c.heldNow() {
		if h {
			n++
		}
	}
	return n
}

// heldNow is, by bucket, whether this replica acts on it now.
func (c *Coordinator) heldNow() []bool {
	v := c.view.Load()
	if !time.Now().Before(v.until) {
		return make([]bool, len(v.held))
	}
	return v.held
}

// HeldGauge is the series of the buckets a replica holds, read from held
// (Held).
func HeldGauge(held func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sless_autoscaler_buckets_held", Help: "Buckets of functions this replica scales, of --buckets (sless autoscaler).",
	}, func() float64 { return float64(held()) })
}

// Run watches the Leases and steps every RenewEvery, and on every change
// of one, until ctx ends; then it releases its buckets and withdraws its
// member Lease, so that the others take them at once.
func (c *Coordinator) Run(ctx context.Context) error {
	if _, err := c.inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.wake() },
		UpdateFunc: func(any, any) { c.wake() },
		DeleteFunc: func(any) { c.wake() },
	}); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	go c.inf.Run(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), c.inf.HasSynced) {
		return fmt.Errorf("shard: list the Leases in %s: %w", c.cfg.Namespace, ctx.Err())
	}
	t := time.NewTicker(c.cfg.RenewEvery)
	defer t.Stop()
	for {
		c.step(ctx, time.Now())
		select {
		case <-ctx.Done():
			leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			c.leave(leaveCtx)
			return nil
		case <-t.C:
		case <-c.poke:
		}
	}
}

func (c *Coordinator) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// step renews this replica, deals the buckets among the live ones, lets
// go of those dealt elsewhere and takes those dealt here that are free.
func (c *Coordinator) step(ctx context.Context, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch err := c.renew(ctx, now); {
	case err != nil:
		c.log.Warn("autoscaler shard: renew this replica's Lease", "err", err)
		c.cutOff = true
	case c.cutOff:
		// Back from a time without the API server, which the others
		// likely had too: their Leases could not change either, so each
		// gets a whole duration from now, not one counted through it.
		clear(c.seen)
		c.cutOff = false
	}
	if now.Sub(c.renewed) >= c.renewDeadline() {
		// Others may count this replica dead soon: stop acting before
		// they take its buckets.
		c.publish(c.current(nil))
		return
	}
	members := c.liveMembers(now)
	dealt := Deal(c.cfg.Buckets, slices.Collect(maps.Keys(members)))
	v := c.current(members)
	keep := slices.Clone(v.held)
	for b := range keep {
		keep[b] = keep[b] && dealt[b] == c.cfg.Self.Name
	}
	// Stop acting first, then release. A published view is never changed.
	until := c.renewed.Add(c.renewDeadline())
	c.publish(&view{held: slices.Clone(keep), until: until, holders: v.holders, members: members, synced: true})
	for b, holder := range v.holders {
		if holder == c.cfg.Self.Name && dealt[b] != c.cfg.Self.Name {
			c.release(ctx, b)
		}
	}
	for b, holder := range v.holders {
		_, live := members[holder]
		if dealt[b] == c.cfg.Self.Name && (holder == "" || holder != c.cfg.Self.Name && !live) && c.acquire(ctx, b, now) {
			keep[b] = true
		}
	}
	c.publish(&view{held: keep, until: until, holders: c.holders(), members: members, synced: true})
	c.collect(ctx, now)
}

// renewDeadline is how long after its last renewal a replica stops
// acting: well within LeaseDuration, after which the others may take
// its buckets.
func (c *Coordinator) renewDeadline() time.Duration {
	return c.cfg.LeaseDuration - c.cfg.RenewEvery
}

// current is the buckets as the Leases say now: held where this replica
// holds the Lease (none without members, when it must not act).
func (c *Coordinator) current(members map[string]Member) *view {
	holders := c.holders()
	held := make([]bool, len(holders))
	for b, h := range holders {
		held[b] = members != nil && h == c.cfg.Self.Name
	}
	return &view{held: held, holders: holders, members: members, synced: true}
}

// publish replaces the view, and calls OnChange when the buckets held
// changed.
func (c *Coordinator) publish(v *view) {
	old := c.view.Swap(v)
	if !slices.Equal(old.held, v.held) {
		c.log.Info("autoscaler shard: buckets held", "buckets", heldList(v.held), "of", c.cfg.Buckets)
		if c.OnChange != nil {
			c.OnChange()
		}
	}
}

func heldList(held []bool) []int {
	var out []int
	for b, h := range held {
		if h {
			out = append(out, b)
		}
	}
	return out
}

// holders reads each bucket's holder from the watch.
func (c *Coordinator) holders() []string {
	out := make([]string, c.cfg.Buckets)
	for b := range out {
		if l := c.bucket(b); l != nil {
			out[b] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	return out
}

// bucket is bucket b's Lease, nil when there is none yet.
func (c *Coordinator) bucket(b int) *coordinationv1.Lease {
	obj, ok, err := c.buckets.GetByKey(c.cfg.Namespace + "/" + c.bucketName(b))
	if err != nil || !ok {
		return nil
	}
	l, _ := obj.(*coordinationv1.Lease)
	return l
}

// liveMembers are the member Leases seen to change within their
// duration, by name, this replica among them.
func (c *Coordinator) liveMembers(now time.Time) map[string]Member {
	all, err := c.leases.List(labels.SelectorFromSet(labels.Set{kindLabel: kindMember}))
	if err != nil {
		c.log.Error("autoscaler shard: list member Leases", "err", err)
	}
	live := map[string]Member{c.cfg.Self.Name: c.cfg.Self}
	for _, l := range all {
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == c.cfg.Self.Name {
			continue
		}
		if now.Sub(c.sighted(l, now)) < time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0))*time.Second {
			name := *l.Spec.HolderIdentity
			live[name] = Member{Name: name, Push: l.Annotations[pushAnnotation], GRPC: l.Annotations[grpcAnnotation]}
			if got := l.Annotations[bucketsAnnoation]; got != strconv.Itoa(c.cfg.Buckets) {
				c.log.Error("autoscaler shard: replicas disagree on the buckets: give every replica the same --buckets",
					"replica", name, "its", got, "ours", c.cfg.Buckets)
			}
		}
	}
	return live
}

// sighted is when l was first seen as it is now.
func (c *Coordinator) sighted(l *coordinationv1.Lease, now time.Time) time.Time {
	s, ok := c.seen[l.Name]
	if !ok || s.version != l.ResourceVersion {
		s = sighting{version: l.ResourceVersion, at: now}
		c.seen[l.Name] = s
	}
	return s.at
}

// collect deletes the member Leases of replicas gone for ten of their
// durations (killed, not stopped), so that restarts do not pile them up.
func (c *Coordinator) collect(ctx context.Context, now time.Time) {
	all, _ := c.leases.List(labels.SelectorFromSet(labels.Set{kindLabel: kindMember}))
	for _, l := range all {
		gone := 10 * time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
		if l.Name == c.memberName() || now.Sub(c.sighted(l, now)) < gone {
			continue
		}
		err := c.client.CoordinationV1().Leases(c.cfg.Namespace).Delete(ctx, l.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Warn("autoscaler shard: delete a gone replica's Lease", "lease", l.Name, "err", err)
		}
	}
	for name := range c.seen {
		if _, err := c.leases.Get(name); apierrors.IsNotFound(err) {
			delete(c.seen, name)
		}
	}
}

func (c *Coordinator) memberName() string { return c.cfg.Prefix + "-member-" + c.cfg.Self.Name }

func (c *Coordinator) bucketName(b int) string { return BucketLease(c.cfg.Prefix, b, c.cfg.Buckets) }

// BucketLease names the Lease of bucket b of n, whose holder is the
// replica scaling its functions.
func BucketLease(prefix string, b, n int) string {
	return fmt.Sprintf("%s-bucket-%d-of-%d", prefix, b, n)
}

// renew writes this replica's member Lease, creating it when missing.
func (c *Coordinator) renew(ctx context.Context, now time.Time) error {
	api := c.client.CoordinationV1().Leases(c.cfg.Namespace)
	if c.self == nil {
		l, err := api.Get(ctx, c.memberName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l, err = api.Create(ctx, c.memberLease(now), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create %s: %w", c.memberName(), err)
			}
			c.self, c.renewed = l, now
			return nil
		case err != nil:
			return fmt.Errorf("get %s: %w", c.memberName(), err)
		}
		c.self = l
	}
	want := c.memberLease(now)
	l := c.self.DeepCopy()
	l.Labels, l.Annotations, l.Spec = want.Labels, want.Annotations, want.Spec
	l, err := api.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		c.self = nil // read again next time
		return fmt.Errorf("update %s: %w", c.memberName(), err)
	}
	c.self, c.renewed = l, now
	return nil
}

func (c *Coordinator) memberLease(now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: c.memberName(), Namespace: c.cfg.Namespace,
			Labels: map[string]string{kindLabel: kindMember},
			Annotations: map[string]string{pushAnnotation: c.cfg.Self.Push, grpcAnnotation: c.cfg.Self.GRPC,
				bucketsAnnoation: strconv.Itoa(c.cfg.Buckets)}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(c.cfg.Self.Name),
			LeaseDurationSeconds: ptr.To(int32(c.cfg.LeaseDuration.Round(time.Second) / time.Second)),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
		},
	}
}

// acquire takes bucket b's Lease, as read from the watch, creating it
// when missing; a conflict means another replica wrote it first.
func (c *Coordinator) acquire(ctx context.Context, b int, now time.Time) bool {
	api := c.client.CoordinationV1().Leases(c.cfg.Namespace)
	var err error
	l := c.bucket(b)
	if l == nil {
		l, err = api.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: c.bucketName(b), Namespace: c.cfg.Namespace, Labels: map[string]string{kindLabel: kindBucket}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(c.cfg.Self.Name),
				AcquireTime: ptr.To(metav1.NewMicroTime(now)), RenewTime: ptr.To(metav1.NewMicroTime(now))},
		}, metav1.CreateOptions{})
		return c.took(b, l, err)
	}
	l = l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(c.cfg.Self.Name)
	l.Spec.AcquireTime, l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now)), ptr.To(metav1.NewMicroTime(now))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	l, err = api.Update(ctx, l, metav1.UpdateOptions{})
	return c.took(b, l, err)
}

// took records a bucket Lease written, or logs why it was not.
func (c *Coordinator) took(b int, l *coordinationv1.Lease, err error) bool {
	switch {
	case err == nil:
		c.buckets.Mutation(l)
		return true
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		c.log.Info("autoscaler shard: another replica took the bucket first", "bucket", b)
	default:
		c.log.Warn("autoscaler shard: take a bucket", "bucket", b, "err", err)
	}
	return false
}

// release gives bucket b's Lease up, if this replica still holds it.
func (c *Coordinator) release(ctx context.Context, b int) {
	l := c.bucket(b)
	if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != c.cfg.Self.Name {
		return
	}
	l = l.DeepCopy()
	l.Spec.HolderIdentity = nil
	l, err := c.client.CoordinationV1().Leases(c.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		c.buckets.Mutation(l)
	} else if !apierrors.IsConflict(err) {
		c.log.Warn("autoscaler shard: release a bucket", "bucket", b, "err", err)
	}
}

// leave stops acting, releases every bucket and deletes the member Lease.
func (c *Coordinator) leave(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.view.Load()
	c.publish(&view{held: make([]bool, c.cfg.Buckets), holders: v.holders, members: v.members, synced: true})
	for b, holder := range c.holders() {
		if holder == c.cfg.Self.Name {
			c.release(ctx, b)
		}
	}
	err := c.client.CoordinationV1().Leases(c.cfg.Namespace).Delete(ctx, c.memberName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.log.Warn("autoscaler shard: withdraw this replica's Lease", "err", err)
	}
}
