package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"sless.dev/sless/internal/forward"
	"sless.dev/sless/invocation"
	"sless.dev/sless/queueproxy"
	"sless.dev/sless/runtimes"
)

// Local queue-proxy settings: the activator stops routing to an instance
// synchronously, so a short quiet period drains safely, and a process on
// this machine is probed often until it first answers.
const (
	quietPeriod = 20 * time.Millisecond
	fastProbe   = 2 * time.Millisecond
)

// run starts one instance and serves until ctx ends (a stop: nil) or the
// runtime process exits (a crash: the error says why). A quiet instance
// holds its output back until it is ready.
func (s *Supervisor) run(ctx context.Context, spec Workload, in *instance, quiet bool) error {
	name := instanceName(spec.Namespace, spec.Name, in.id)
	port, err := s.ports.take()
	if err != nil {
		return err
	}
	defer s.ports.release(port) // every way out has ended the process
	out := newOutput(s.opts.Output, name, quiet, func(line string) { s.opts.Lines(spec.Namespace, spec.Name, name, line) })
	start := time.Now()
	proc, err := startProcess(spec, port, out)
	if err != nil {
		return err
	}
	s.started(in, proc.cmd.Process.Pid)
	qp, err := startQueueProxy(spec, port, s.opts.Records, s.opts.InstanceLog)
	if err != nil {
		proc.terminate(s.opts.StopTimeout)
		return err
	}
	if ready, err := s.awaitReady(ctx, spec, in, proc, qp, out, start); !ready {
		return err
	}
	select {
	case <-proc.exited:
		// Out of the activator's set first: the queue-proxy's drain then
		// ends as soon as the requests at the dead process have failed,
		// instead of serving 502s until its timeout.
		s.died(spec.Namespace, spec.Name, in)
		signalGroup(proc.cmd.Process.Pid, killSignal)
		qp.stop()
		return fmt.Errorf("process exited: %w%s", proc.err, out.tail())
	case <-ctx.Done():
		qp.stop() // drains: requests in flight finish first
		proc.terminate(s.opts.StopTimeout)
		return nil
	}
}

// errNotReady is the error of an instance stopped for never passing its
// readiness check.
var errNotReady = errors.New("not ready")

// unreadyRefresh is how often the cause of an instance that is still
// unready after ReadinessGrace is told again, kept current.
const unreadyRefresh = time.Second

// awaitReady waits for an instance's first healthy answer: ready, or not
// with why (nil when ctx ended), the process and its queue-proxy then
// stopped. An instance unready for ReadinessGrace makes its function
// failing, saying since when, why the last check failed and its last
// output (told again each unreadyRefresh while it stays unready), and is
// given until StartTimeout.
func (s *Supervisor) awaitReady(ctx context.Context, spec Workload, in *instance, proc *process, qp *queueProxy, out *output, start time.Time) (bool, error) {
	name := instanceName(spec.Namespace, spec.Name, in.id)
	timeout := time.NewTimer(s.opts.StartTimeout)
	defer timeout.Stop()
	grace := time.NewTimer(s.opts.ReadinessGrace)
	defer grace.Stop()
	for {
		select {
		case <-qp.srv.FirstReady():
			startup := time.Since(start)
			s.opts.Log.Debug("instance ready", "instance", name, "after", startup)
			out.release()
			s.becameReady(spec.Namespace, spec.Name, in, Endpoint{Addr: qp.addr, Admin: qp.admin, inProcess: qp.inProcess}, qp.srv, startup)
			return true, nil
		case <-proc.exited:
			signalGroup(proc.cmd.Process.Pid, killSignal) // what it left behind
			qp.stop()
			return false, fmt.Errorf("process exited before it was ready: %w%s", proc.err, out.tail())
		case <-grace.C:
			s.unready(spec.Namespace, spec.Name, in, fmt.Sprintf("instance %s has been running without passing its readiness check since %s (%s)%s",
				name, start.UTC().Format(time.RFC3339), cmp.Or(qp.srv.ProbeFailure(), "no check done"), out.tail()))
			grace.Reset(unreadyRefresh)
		case <-timeout.C:
			qp.stop()
			proc.terminate(s.opts.StopTimeout)
			return false, fmt.Errorf("%w within %s (%s)%s", errNotReady, s.opts.StartTimeout, cmp.Or(qp.srv.ProbeFailure(), "no check done"), out.tail())
		case <-ctx.Done():
			qp.stop()
			proc.terminate(s.opts.StopTimeout)
			return false, nil
		}
	}
}

// process is a running runtime process; exited is closed when it exits,
// with err set.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startProcess(spec Workload, port int, out *output) (*process, error) {
	// The Function's own variables, as a Kubernetes container's, are
	// what its command may name.
	own := append(slices.Clip(spec.Env), "PORT="+strconv.Itoa(port))
	cmd := exec.Command(spec.Process.Path, runtimes.Expand(spec.Process.Args, own)...)
	cmd.Dir = spec.Process.Dir
	cmd.Env = append(append(os.Environ(), spec.Process.Env...), own...)
	cmd.Stdout, cmd.Stderr = out, out
	// A child the process left holding its output must not delay the
	// news of its exit.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Process.Path, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exit status 0")
		}
		p.err = err
		close(p.exited)
	}()
	return p, nil
}

// terminate asks the process group to stop, and kills it after timeout.
func (p *process) terminate(timeout time.Duration) {
	signalGroup(p.cmd.Process.Pid, termSignal)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		signalGroup(p.cmd.Process.Pid, killSignal)
		<-p.exited
	}
}

// queueProxy is an instance's in-process queue-proxy. It serves on
// loopback TCP (addr), and on inProcess for the activator in this
// process, which dials it by addr (Supervisor.Dial).
type queueProxy struct {
	srv         *queueproxy.Server
	addr, admin string
	inProcess   *forward.MemListener
	stop        func()
}

func startQueueProxy(spec Workload, userPort int, records invocation.Sink, log *slog.Logger) (*queueProxy, error) {
	cfg := queueproxy.Config{
		Namespace: spec.Namespace, Function: spec.Name, UserPort: userPort, UserProtocol: spec.Protocol,
		Concurrency: spec.Concurrency, QueueDepth: 10 * spec.Concurrency,
		Timeout: spec.Timeout, IdleTimeout: spec.IdleTimeout, MaxDuration: spec.MaxDuration,
		MaxBodyBytes: spec.MaxBodyBytes, DrainTimeout: cmp.Or(spec.Drain, spec.Timeout),
		ReadTimeout: spec.ReadTimeout, RabbitMQ: spec.RabbitMQ, RetryBackoff: spec.RetryBackoff,
	}
	srv, err := queueproxy.New(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("queue-proxy: %w", err)
	}
	srv.QuietPeriod, srv.FastProbe, srv.Records = quietPeriod, fastProbe, records
	serving, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("queue-proxy listen: %w", err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		serving.Close()
		return nil, fmt.Errorf("queue-proxy admin listen: %w", err)
	}
	inProcess := forward.NewMemListener(serving.Addr())
	srv.InProcess = inProcess
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Run(ctx, serving, admin); err != nil {
			log.Error("queue-proxy", "namespace", spec.Namespace, "function", spec.Name, "err", err)
		}
	}()
	return &queueProxy{srv: srv, addr: serving.Addr().String(), admin: admin.Addr().String(),
		inProcess: inProcess, stop: func() { cancel(); <-done }}, nil
}
