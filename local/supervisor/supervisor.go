// Package supervisor runs the local platform's function instances: each a
// runtime process behind an in-process queue-proxy, on free loopback
// ports. It keeps as many instances as the autoscaler asks for, restarts
// crashed processes with backoff, replaces instances when a function
// changes without failing requests in flight (new instances are ready
// before old ones drain), and reports every change of a function's ready
// instances, so the activator routes only to instances that can serve.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/queueproxy/consumer"
	"sless.dev/sless/runtimes"
)

// Workload is what the supervisor runs for one function.
type Workload struct {
	Namespace, Name string
	// Revision changes whenever what the instances run changes, even
	// where Process does not (a script runtime reads its source anew).
	Revision string
	// Process starts the runtime; Env is added to it, then PORT.
	Process runtimes.Process
	Env     []string
	// The queue-proxy settings of each instance.
	Concurrency int
	// Timeout bounds an answer's start, IdleTimeout the silence in a
	// streamed one, MaxDuration a request whole, Drain an instance's
	// drain.
	Timeout, IdleTimeout, MaxDuration, Drain time.Duration
	Protocol                                 v1alpha1.Protocol // what the process speaks
	MaxBodyBytes                             int64
	ReadTimeout                              time.Duration
	// RabbitMQ are the queues each instance consumes, and RetryBackoff
	// the wait before a failed message's first retry.
	RabbitMQ     []queueproxy.RabbitMQ
	RetryBackoff time.Duration
}

// Endpoint is a ready instance: its queue-proxy's serving and admin
// addresses.
type Endpoint struct {
	Addr, Admin string
	// inProcess serves Addr's connections in memory (Supervisor.Dial).
	inProcess *forward.MemListener
}

// Options configure a Supervisor.
type Options struct {
	// Output receives the runtime processes' output, each line prefixed
	// with the instance's name.
	Output io.Writer
	Log    *slog.Logger
	// InstanceLog is for the instances' queue-proxies (Log when nil): the
	// local platform keeps their routine messages out of the terminal.
	InstanceLog *slog.Logger
	// Changed is called, with the supervisor's lock held and so in order,
	// whenever a function's ready instances change. It must not call back
	// into the supervisor.
	Changed func(namespace, name string, ready []Endpoint)
	// Failing is called, like Changed, when a function's current version
	// starts or stops failing: its instances crash-loop before ready
	// (reason v1alpha1.ReasonCrashing, or ReasonReadinessFailing when they
	// were stopped for never passing the readiness check), or one has run
	// for ReadinessGrace without passing it (ReasonReadinessFailing).
	// cause says why; reason and cause are empty once an instance of it
	// became ready or the function changed. serving counts the ready
	// instances of earlier versions.
	Failing func(namespace, name, reason, cause string, serving int)
	// Crashed, when set, is called, like Changed, for every instance
	// that exits unasked.
	Crashed func(namespace, name string)
	// Lines, when set, receives every line of every instance's output
	// (instance names it), including the lines a retry keeps off Output.
	// It is called from the output copiers and must not block.
	Lines func(namespace, name, instance, line string)
	// Records keeps the records of the messages instances consume.
	Records invocation.Sink
	// StartTimeout bounds the wait for a new instance to become ready.
	StartTimeout time.Duration
	// ReadinessGrace is how long an instance may run without passing its
	// readiness check before its function is failing
	// (v1alpha1.ReadinessGrace when 0).
	ReadinessGrace time.Duration
	// StopTimeout bounds the wait for a runtime process to exit after
	// SIGTERM, before it is killed.
	StopTimeout time.Duration
}

// Restart backoff: a function whose processes crash before becoming ready
// waits minBackoff, doubling up to maxBackoff, before the next start.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// CrashLoopAfter is how many crashes in a row before an instance became
// ready make a function's version failing: a broken start shows at once
// instead of after the request timeout, and a lone crash (a port clash, a
// killed process) does not.
const CrashLoopAfter = 3

// Supervisor keeps each function's instances at the number asked for.
type Supervisor struct {
	opts  Options
	wg    sync.WaitGroup
	ports *ports

	mu     sync.Mutex
	fns    map[types.NamespacedName]*function
	nextID int
	closed bool
}

type function struct {
	spec      Workload
	gen       int
	desired   int
	insts     []*instance
	removed   bool
	crashes   int
	lastError string
	failures  int           // crashes since an instance was last ready
	failing   string        // the cause, once failures reached CrashLoopAfter or an instance ran ReadinessGrace unready
	reason    string        // failing's, a v1alpha1 Reason*
	startup   time.Duration // the latest instance's start: exec to ready
	notBefore time.Time     // no start before this (backoff)
	retry     *time.Timer
}

type instance struct {
	id, gen  int
	started  time.Time
	pid      int // its runtime process's, once started
	ready    bool
	stopping bool
	died     bool // its process exited unasked, even if a stop followed
	ep       Endpoint
	stop     context.CancelFunc
	qp       *queueproxy.Server // once ready
}

// New returns a supervisor with no functions.
func New(opts Options) *Supervisor {
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if opts.ReadinessGrace == 0 {
		opts.ReadinessGrace = v1alpha1.ReadinessGrace
	}
	if opts.InstanceLog == nil {
		opts.InstanceLog = opts.Log
	}
	if opts.Changed == nil {
		opts.Changed = func(string, string, []Endpoint) {}
	}
	if opts.Failing == nil {
		opts.Failing = func(string, string, string, string, int) {}
	}
	if opts.Lines == nil {
		opts.Lines = func(string, string, string, string) {}
	}
	return &Supervisor{opts: opts, fns: map[types.NamespacedName]*function{}, ports: newPorts()}
}

// key is a function's key in the supervisor's map.
func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// Set adds a function or changes it. A change starts a new generation of
// instances; the old ones are drained as the new ones become ready.
func (s *Supervisor) Set(fn Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(fn.Namespace, fn.Name)]
	switch {
	case f == nil:
		f = &function{spec: fn}
		s.fns[key(fn.Namespace, fn.Name)] = f
	case f.removed || !reflect.DeepEqual(f.spec, fn):
		if f.removed {
			// Added back while its instances drain: it starts from zero
			// like a new function, since the autoscaler forgot it too.
			f.desired = 0
		}
		f.spec, f.removed = fn, false
		f.gen++
		f.notBefore = time.Time{}
		s.recovered(f)
	default:
		return
	}
	s.reconcile(f)
}

// Remove drains and stops all of a function's instances.
func (s *Supervisor) Remove(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fns[key(namespace, name)]; f != nil {
		f.removed = true
		s.reconcile(f)
		s.forgetIfIdle(namespace, name, f)
	}
}

// Scale sets the number of instances of a function and returns the
// instances it had, starting or ready (not those stopping). It is the
// autoscaler's writer of replicas in local mode: instances start and stop
// in the background.
func (s *Supervisor) Scale(_ context.Context, namespace, name string, replicas int32) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(namespace, name)]
	if f == nil || f.removed {
		return 0, fmt.Errorf("scale %s/%s: no such function", namespace, name)
	}
	had := 0
	for _, in := range f.insts {
		if !in.stopping {
			had++
		}
	}
	f.desired = int(replicas)
	s.reconcile(f)
	return int32(had), nil
}

// reconcile starts and stops instances so that the current generation has
// the desired number, and retires old generations' instances as current
// ones become ready. Called with s.mu held.
func (s *Supervisor) reconcile(f *function) {
	want := f.desired
	if f.removed || s.closed {
		want = 0
	}
	var cur, old []*instance
	readyCur := 0
	for _, in := range f.insts {
		switch {
		case in.stopping:
		case in.gen == f.gen:
			cur = append(cur, in)
			if in.ready {
				readyCur++
			}
		default:
			old = append(old, in)
		}
	}
	if len(cur) < want {
		if wait := time.Until(f.notBefore); wait > 0 {
			s.retryAfter(f, wait)
		} else {
			for range want - len(cur) {
				s.start(f)
			}
		}
	}
	// Stop surplus instances, those not ready yet first, newest first.
	for _, in := range surplus(cur, len(cur)-want) {
		s.stopInstance(f, in)
	}
	// Old generations serve until enough current instances are ready.
	for _, in := range surplus(old, len(old)-max(want-readyCur, 0)) {
		s.stopInstance(f, in)
	}
}

// surplus picks n of insts to stop: not ready before ready, newest first.
func surplus(insts []*instance, n int) []*instance {
	if n <= 0 {
		return nil
	}
	sorted := slices.Clone(insts)
	slices.SortFunc(sorted, func(a, b *instance) int {
		if a.ready != b.ready {
			if a.ready {
				return 1
			}
			return -1
		}
		return b.id - a.id
	})
	return sorted[:min(n, len(sorted))]
}

func (s *Supervisor) retryAfter(f *function, wait time.Duration) {
	if f.retry != nil {
		return
	}
	f.retry = time.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		f.retry = nil
		s.reconcile(f)
	})
}

func (s *Supervisor) start(f *function) {
	s.nextID++
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{id: s.nextID, gen: f.gen, started: time.Now(), stop: cancel}
	f.insts = append(f.insts, in)
	spec := f.spec
	// A retry after a crash before ready keeps its output off the
	// terminal unless it becomes ready: the first crash showed it.
	quiet := f.failures > 0
	s.wg.Go(func() {
		err := s.run(ctx, spec, in, quiet)
		s.exited(spec.Namespace, spec.Name, in, err)
	})
}

// stopInstance takes an instance out of the ready set, then drains it:
// the activator stops sending to it before its queue-proxy drains.
func (s *Supervisor) stopInstance(f *function, in *instance) {
	in.stopping = true
	if in.ready {
		in.ready = false
		s.changed(f)
	}
	in.stop()
}

// exited forgets an instance whose run returned; err is why it failed.
func (s *Supervisor) exited(namespace, name string, in *instance, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(namespace, name)]
	if f == nil {
		return
	}
	f.insts = slices.DeleteFunc(f.insts, func(x *instance) bool { return x == in })
	if in.ready {
		in.ready = false
		s.changed(f)
	}
	if err != nil && (!in.stopping || in.died) {
		s.crashed(f, in, err)
	}
	s.reconcile(f)
	s.forgetIfIdle(namespace, name, f)
}

// crashed counts a crash and sets the backoff of the next start. Called
// with s.mu held.
func (s *Supervisor) crashed(f *function, in *instance, err error) {
	f.crashes++
	f.lastError = err.Error()
	if s.opts.Crashed != nil {
		s.opts.Crashed(f.spec.Namespace, f.spec.Name)
	}
	if in.gen != f.gen {
		return // an old version's: its replacement is starting
	}
	f.failures++
	backoff := min(minBackoff<<min(f.failures-1, 20), maxBackoff)
	f.notBefore = time.Now().Add(backoff)
	s.opts.Log.Warn("instance crashed", "namespace", f.spec.Namespace, "function", f.spec.Name,
		"instance", in.id, "inARow", f.failures, "restartIn", backoff, "err", err)
	if f.failures >= CrashLoopAfter {
		reason := v1alpha1.ReasonCrashing
		if errors.Is(err, errNotReady) {
			reason = v1alpha1.ReasonReadinessFailing
		}
		s.fail(f, reason, err.Error())
	}
}

// unready reports an instance of f's current version that has run for
// ReadinessGrace without passing its readiness check: its function is
// failing, unless it already is for another reason. Reported again while
// the instance stays unready, the cause is kept current: the last check's
// failure, and output the runtime printed since (a slow start may print
// nothing within the grace).
func (s *Supervisor) unready(namespace, name string, in *instance, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(namespace, name)]
	switch {
	case f == nil || in.stopping || in.gen != f.gen:
	case f.failing == "":
		s.fail(f, v1alpha1.ReasonReadinessFailing, cause)
	case f.reason == v1alpha1.ReasonReadinessFailing:
		f.failing = cause
	}
}

// fail makes f's current version failing for reason, telling Failing the
// first time. Called with s.mu held.
func (s *Supervisor) fail(f *function, reason, cause string) {
	first := f.failing == ""
	f.failing, f.reason = cause, reason
	if first {
		s.opts.Failing(f.spec.Namespace, f.spec.Name, reason, cause, readyCount(f))
	}
}

// recovered forgets the crashes in a row of a function's version. Called
// with s.mu held.
func (s *Supervisor) recovered(f *function) {
	f.failures = 0
	if f.failing != "" {
		f.failing, f.reason = "", ""
		s.opts.Failing(f.spec.Namespace, f.spec.Name, "", "", readyCount(f))
	}
}

func readyCount(f *function) int {
	n := 0
	for _, in := range f.insts {
		if in.ready {
			n++
		}
	}
	return n
}

// becameReady marks an instance ready, unless it is being stopped; it
// took startup from the start of its process.
func (s *Supervisor) becameReady(namespace, name string, in *instance, ep Endpoint, qp *queueproxy.Server, startup time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(namespace, name)]
	if f == nil || in.stopping {
		return
	}
	in.ready, in.ep, in.qp = true, ep, qp
	f.startup = startup
	if in.gen == f.gen {
		s.recovered(f)
	}
	s.changed(f)
	s.reconcile(f) // old generations may retire now
}

// died takes an instance whose process exited unasked out of the ready
// set at once; exited records the crash once its queue-proxy has stopped,
// even if the instance is told to stop meanwhile (its function scaled
// down as its ready count dropped).
func (s *Supervisor) died(namespace, name string, in *instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.died = true
	if f := s.fns[key(namespace, name)]; f != nil && in.ready {
		in.ready = false
		s.changed(f)
	}
}

func (s *Supervisor) changed(f *function) {
	var ready []Endpoint
	for _, in := range f.insts {
		if in.ready {
			ready = append(ready, in.ep)
		}
	}
	s.opts.Changed(f.spec.Namespace, f.spec.Name, ready)
}

func (s *Supervisor) forgetIfIdle(namespace, name string, f *function) {
	if f.removed && len(f.insts) == 0 {
		if f.retry != nil {
			f.retry.Stop()
		}
		delete(s.fns, key(namespace, name))
	}
}

// Status is a function as the supervisor runs it, for the admin API.
type Status struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Desired    int    `json:"desired"`
	Starting   int    `json:"starting"`
	Ready      int    `json:"ready"`
	Stopping   int    `json:"stopping"`
	Generation int    `json:"generation"`
	Crashes    int    `json:"crashes"`
	LastError  string `json:"lastError,omitempty"`
	// Failing is why the current version cannot become ready: the last
	// crash, once its instances crashed CrashLoopAfter times in a row
	// before ready, or an instance that runs without passing its
	// readiness check; FailingReason names it (v1alpha1.ReasonCrashing,
	// ReasonReadinessFailing).
	Failing       string `json:"failing,omitempty"`
	FailingReason string `json:"failingReason,omitempty"`
	// LastStartup is how long the latest instance took from the start of
	// its process to its first healthy answer: a cold start's own share.
	LastStartup time.Duration `json:"lastStartupNs"`
	Instances   []Instance    `json:"instances"`
}

// Instance is one instance as Status shows it.
type Instance struct {
	// Name is namespace/name#id, as its output lines are prefixed.
	Name string `json:"name"`
	// State is starting, ready or stopping.
	State      string    `json:"state"`
	Generation int       `json:"generation"`
	Started    time.Time `json:"started"`
	// Addr is its queue-proxy's, once ready.
	Addr string `json:"addr,omitempty"`
	// Consumers are what its consumers of the function's queues do.
	Consumers []consumer.Status `json:"consumers,omitempty"`
}

// Status reports one function; ok is false when it is unknown.
func (s *Supervisor) Status(namespace, name string) (st Status, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fns[key(namespace, name)]
	if f == nil {
		return Status{}, false
	}
	st = Status{Namespace: namespace, Name: name, Desired: f.desired, Generation: f.gen,
		Crashes: f.crashes, LastError: f.lastError, Failing: f.failing, FailingReason: f.reason, LastStartup: f.startup}
	st.Instances = make([]Instance, 0, len(f.insts))
	for _, in := range f.insts {
		is := Instance{Name: instanceName(namespace, name, in.id), Generation: in.gen, Started: in.started, Addr: in.ep.Addr}
		if in.qp != nil {
			is.Consumers = in.qp.Consumers()
		}
		switch {
		case in.stopping:
			st.Stopping++
			is.State = "stopping"
		case in.ready:
			st.Ready++
			is.State = "ready"
		default:
			st.Starting++
			is.State = "starting"
		}
		st.Instances = append(st.Instances, is)
	}
	return st, true
}

// InstanceMetrics is a ready instance's queue-proxy metrics.
type InstanceMetrics struct {
	// Instance names it: namespace/name#id.
	Instance string
	Gatherer prometheus.Gatherer
}

// Metrics lists the metrics of every ready instance.
func (s *Supervisor) Metrics() []InstanceMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InstanceMetrics
	for _, f := range s.fns {
		for _, in := range f.insts {
			if in.ready {
				out = append(out, InstanceMetrics{Instance: instanceName(f.spec.Namespace, f.spec.Name, in.id), Gatherer: in.qp.Gatherer()})
			}
		}
	}
	return out
}

func instanceName(namespace, name string, id int) string {
	return fmt.Sprintf("%s/%s#%d", namespace, name, id)
}

// Shutdown drains and stops every instance and waits for them. When ctx
// ends first, the processes still running are killed, and their
// queue-proxies end with the requests at them.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, f := range s.fns {
		s.reconcile(f)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	killed := 0
	for _, f := range s.fns {
		for _, in := range f.insts {
			if in.pid > 0 {
				signalGroup(in.pid, killSignal)
				killed++
			}
		}
	}
	s.mu.Unlock()
	s.opts.Log.Warn("drain time spent: killed the instances still running", "instances", killed)
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("instances still stopping %v after they were killed", s.opts.StopTimeout)
	}
}

// started records an instance's process, for Shutdown to kill.
func (s *Supervisor) started(in *instance, pid int) {
	s.mu.Lock()
	in.pid = pid
	s.mu.Unlock()
}
