package devharness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/local"
)

// Process is `sless dev` as the sless binary's own process, with no
// broker and its invocation records in memory: the platform alone. Its
// output goes to a file in the run's directory (LogTail, LogLines).
type Process struct {
	Cmd *exec.Cmd
	// Listen and Admin are its invocation and admin API addresses,
	// host:port.
	Listen, Admin string
	run           run
	log           *os.File
	functions     int
}

// statusPoll is how often a Process's states are read: a list of a
// thousand functions is a large answer, and the read is the measured
// process's work.
const statusPoll = time.Second

// Start runs `bin dev` on o's functions, in a directory named for the
// benchmark, and returns once the process has started: Wait for its
// functions.
func Start(benchmark, bin string, o Options) (*Process, error) {
	r, err := newRun(benchmark, o)
	if err != nil {
		return nil, err
	}
	p, err := start(r, bin, o)
	if err != nil {
		os.RemoveAll(r.dir)
		return nil, err
	}
	return p, nil
}

func start(r run, bin string, o Options) (*Process, error) {
	ports, err := hops.FreePorts(2)
	if err != nil {
		return nil, err
	}
	p := &Process{run: r, functions: len(o.Functions),
		Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), Admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	args := []string{"dev", "--functions", r.functions, "--cache-dir", r.cache, "--listen", p.Listen, "--admin", p.Admin,
		"--amqp-url", "", "--database-url", ""}
	if o.AllowExternalSources {
		args = append(args, "--allow-external-sources")
	}
	if o.Drain > 0 {
		args = append(args, "--drain", o.Drain.String())
	}
	if p.log, err = os.Create(p.logFile()); err != nil {
		return nil, err
	}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.log, p.log
	if err := p.Cmd.Start(); err != nil {
		p.log.Close()
		return nil, fmt.Errorf("start sless dev: %w", err)
	}
	return p, nil
}

// Dir is the run's directory, removed by Stop: where a benchmark keeps
// files of its own for the run.
func (p *Process) Dir() string { return p.run.dir }

// Pid is the process's.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// URL is where a function is invoked.
func (p *Process) URL(namespace, name string) string {
	return "http://" + p.Listen + "/fn/" + namespace + "/" + name
}

// Wait polls the admin API until every function satisfies ok, for at
// most within; a failed or crashing function ends the wait.
func (p *Process) Wait(ctx context.Context, within time.Duration, ok func(local.FunctionStatus) bool) error {
	return waitAll(ctx, p.list, p.functions, statusPoll, within, ok)
}

var adminClient = &http.Client{Timeout: time.Minute}

// list reads the functions' states from the admin API.
func (p *Process) list(ctx context.Context) ([]local.FunctionStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Admin+"/v1/functions", nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var list adminapi.List[local.FunctionStatus]
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	return list.Functions, nil
}

// Stop stops sless dev (it drains, then stops its instances), kills it
// when it has not exited within a minute, kills any instance process it
// left behind, and removes the run's directory.
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = p.Cmd.Process.Kill()
		<-done
	}
	killLeftovers(p.run.dir)
	p.log.Close()
	os.RemoveAll(p.run.dir)
}

// killLeftovers kills the processes whose command line names dir: an
// instance's names its build in the run's cache.
func killLeftovers(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			fmt.Fprintf(os.Stderr, "killing left-over process %d\n", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (p *Process) logFile() string { return filepath.Join(p.run.dir, "sless-dev.log") }

// LogTail is the last n lines of sless dev's output.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.logFile())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// LogLines is the first n lines of sless dev's output that contain one
// of words.
func (p *Process) LogLines(words []string, n int) string {
	b, err := os.ReadFile(p.logFile())
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if len(out) < n && slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return strings.Join(out, "\n")
}
