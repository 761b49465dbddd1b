package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/invocation"
	"sless.dev/sless/load"
	"sless.dev/sless/load/queue"
	"sless.dev/sless/load/report"
)

// loadFlags are the flags of `sless load`.
type loadFlags struct {
	function, rate, body, bodyFile, jsonFile, method, reportDir string
	queue, amqpURL                                              string
	messages                                                    int
	declareQueue                                                bool
	headers                                                     []string
	connections                                                 int
	requests                                                    int64
	duration, warmup, timeout                                   time.Duration
	allowRemote                                                 bool
	compare                                                     bool
}

func newLoadCommand() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load [URL]",
		Short: "Send load to a function and report latency, throughput and errors with what the platform did",
		Long: `load drives a function open-loop at a rate (--rate 500, or steps such as
--rate 0:500:30s,500:500:60s: a ramp to 500 per second over 30 s, then a minute
at 500), with latency measured from each request's intended send time (no
coordinated omission), or closed-loop with --connections. Latencies go into
an HDR histogram. While it runs, it samples the function's instances each
second from the admin API (--function, or a /fn/<namespace>/<name> URL).

  sless load --function default/hello-go --rate 1000 --duration 30s
  sless load http://127.0.0.1:8080/fn/default/stress-slow?seconds=0.1 --connections 50 --json run.json
  sless load --compare before.json after.json`,
		Args: cobra.MaximumNArgs(2),
	}
	c := adminFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.function, "function", "", "namespace/name: the function to load, its URL read from the admin API")
	fl.StringVar(&f.rate, "rate", "", "open loop: requests per second, or steps from:to:duration,... (closed loop when empty)")
	fl.IntVarP(&f.connections, "connections", "c", 64, fmt.Sprintf("requests in flight at most (1 to %d)", load.MaxConnections))
	fl.DurationVarP(&f.duration, "duration", "d", 10*time.Second, "how long to send, for a fixed rate or a closed loop")
	fl.Int64Var(&f.requests, "requests", 0, "closed loop: stop after this many requests instead")
	fl.DurationVar(&f.warmup, "warmup", 0, "send this long first, unmeasured")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "the longest a request may take")
	fl.StringVarP(&f.method, "method", "X", "GET", "the request method")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, `a request header, "Name: value" (repeatable)`)
	fl.StringVar(&f.body, "body", "", "the request body")
	fl.StringVar(&f.bodyFile, "body-file", "", "the request body, from a file")
	fl.StringVar(&f.jsonFile, "json", "", "write every second's figures and the latency histogram to this file")
	fl.StringVar(&f.reportDir, "report", "", "write plots (PNG) and a Markdown page of the run into this directory")
	fl.BoolVar(&f.compare, "compare", false, "compare two --json files: sless load --compare a.json b.json")
	fl.StringVar(&f.queue, "queue", "", "publish --messages to this RabbitMQ queue and report how fast the function drains it")
	fl.IntVar(&f.messages, "messages", 0, "with --queue: how many messages to publish")
	fl.BoolVar(&f.declareQueue, "declare-queue", false, "with --queue: declare the queue, durable, when it is missing")
	fl.StringVar(&f.amqpURL, "amqp-url", defaultAMQPURL(), "with --queue: the broker (default $SLESS_AMQP_URL or the local RabbitMQ)")
	fl.BoolVar(&f.allowRemote, "allow-remote", false, "allow a target off this machine (loopback only by default)")
	check := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return err
		}
		return f.check(args)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.compare {
			return compareRuns(cmd.OutOrStdout(), args[0], args[1])
		}
		if f.queue != "" {
			return runQueue(cmd.Context(), cmd, c, f)
		}
		return runLoad(cmd.Context(), cmd, c, f, args)
	}
	return cmd
}

// check refuses flags that cannot run, before anything is sent.
func (f *loadFlags) check(args []string) error {
	switch {
	case f.compare && len(args) != 2:
		return errors.New("--compare takes two --json files")
	case f.compare:
		return nil
	case f.queue != "" && (len(args) > 0 || f.rate != "" || f.requests > 0):
		return errors.New("--queue publishes messages: no URL, --rate or --requests")
	case f.queue != "" && (f.messages < 1 || f.messages > maxMessages):
		return fmt.Errorf("--queue needs --messages from 1 to %d", maxMessages)
	case f.queue != "" && f.duration <= 0:
		return errors.New("--duration bounds the wait for the drain: it must be positive")
	case f.queue != "":
		return nil
	case f.messages != 0 || f.declareQueue:
		return errors.New("--messages and --declare-queue go with --queue")
	case len(args) > 1:
		return errors.New("one URL at most")
	case (len(args) == 1) == (f.function != ""):
		return errors.New("give a URL or --function namespace/name, one of them")
	case f.body != "" && f.bodyFile != "":
		return errors.New("--body or --body-file, not both")
	case f.rate != "" && f.requests > 0:
		return errors.New("--requests ends a closed loop; an open loop ends with --duration or its steps")
	}
	if f.rate != "" {
		if _, _, err := load.ParseSteps(f.rate); err != nil {
			return fmt.Errorf("--rate: %w", err)
		}
	}
	for _, h := range f.headers {
		if name, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("--header %q: want \"Name: value\"", h)
		}
	}
	// The rest of the rules are the run's own (connections, a duration or
	// requests, no negative time): checked here, they are a usage error
	// before anything is sent, not a failed run.
	return f.runOptions("").Check()
}

// readBody is --body, or --body-file's content.
func (f *loadFlags) readBody() ([]byte, error) {
	if f.bodyFile == "" {
		return []byte(f.body), nil
	}
	b, err := os.ReadFile(f.bodyFile)
	if err != nil {
		return nil, usageError{fmt.Errorf("--body-file: %w", err)}
	}
	return b, nil
}

// options turns the flags into a run's options; a bad body file or
// target is a usage error.
func (f *loadFlags) options(target string) (load.Options, error) {
	body, err := f.readBody()
	if err != nil {
		return load.Options{}, err
	}
	o := f.runOptions(target)
	o.Body = body
	return o, nil
}

// runOptions are the run's options the flags give, the body left out.
func (f *loadFlags) runOptions(target string) load.Options {
	o := load.Options{URL: target, Method: f.method, Connections: f.connections, Duration: f.duration,
		Requests: f.requests, Warmup: f.warmup, Timeout: f.timeout, AllowRemote: f.allowRemote}
	for _, h := range f.headers {
		name, value, _ := strings.Cut(h, ":")
		o.Header = append(o.Header, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	}
	if f.rate != "" {
		steps, fixed, _ := load.ParseSteps(f.rate)
		if fixed {
			o.Rate = steps[0].From
		} else {
			o.Steps = steps
		}
	}
	if f.requests > 0 {
		o.Duration = 0
	}
	return o
}

func runLoad(ctx context.Context, cmd *cobra.Command, c *adminClient, f loadFlags, args []string) error {
	target, fnPath, err := resolveTarget(c, f, args)
	if err != nil {
		return err
	}
	o, err := f.options(target)
	if err != nil {
		return err
	}
	u, err := load.CheckTarget(target, f.allowRemote)
	if err != nil {
		return usageError{err}
	}
	if err := reachable(ctx, u); err != nil {
		return usageError{err}
	}
	var sampler *platformSampler
	if fnPath != "" {
		// The platform's view is a bonus of a URL target: without it
		// (no admin API there, or no token) the run goes on, saying so.
		if _, err := c.get(fnPath, nil); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "sless load: no view of the platform (instances, cold starts): %v\n", err)
		} else {
			sampler = &platformSampler{c: c, path: fnPath}
		}
	}
	progress := newProgressLine(cmd.ErrOrStderr(), sampler)
	o.Progress = progress.show
	run := report.Run{URL: target, Started: time.Now(), Rate: f.rate, Connections: f.connections}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if sampler != nil {
		go sampler.run(ctx, run.Started.Add(f.warmup))
	}
	run.Result, err = load.Run(ctx, o)
	run.Platform = sampler.end(stop, run.Started.Add(f.warmup))
	progress.end()
	if err != nil {
		return err
	}
	if err := report.Summary(cmd.OutOrStdout(), run); err != nil {
		return err
	}
	if err := f.write(cmd, run); err != nil {
		return err
	}
	if c.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(run)
	}
	return nil
}

// write saves the run as --json and --report ask.
func (f *loadFlags) write(cmd *cobra.Command, run report.Run) error {
	if f.jsonFile != "" {
		if err := report.WriteJSON(f.jsonFile, run); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.reportDir != "" {
		if err := report.Write(f.reportDir, run); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "report: %s\n", filepath.Join(f.reportDir, report.Files.Page))
	}
	return nil
}

// resolveTarget is the URL to load and, when it names a function, the
// function's admin API path.
func resolveTarget(c *adminClient, f loadFlags, args []string) (target, fnPath string, err error) {
	if f.function != "" {
		_, _, fnPath = functionPath(f.function)
		var st adminapi.Status
		if _, err := c.get(fnPath, &st); err != nil {
			return "", "", usageError{fmt.Errorf("--function %s: %w", f.function, err)}
		}
		return st.URL, fnPath, nil
	}
	u, err := url.Parse(args[0])
	if err != nil || u.Host == "" {
		return "", "", usageError{fmt.Errorf("%q is not a URL: want http://host:port/path", args[0])}
	}
	// A platform URL names its function: sample it when the API answers.
	if parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/"); len(parts) >= 3 && parts[0] == "fn" {
		_, _, fnPath = functionPath(parts[1] + "/" + parts[2])
	}
	return args[0], fnPath, nil
}

// reachable dials the target once, so a wrong address is an error at
// once rather than a run of connection errors.
func reachable(ctx context.Context, u *url.URL) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", load.HostPort(u))
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", u, err)
	}
	return conn.Close()
}

// platformSampler reads the function from the admin API each second.
type platformSampler struct {
	c    *adminClient
	path string

	mu      sync.Mutex
	samples []report.PlatformSample
}

func (s *platformSampler) run(ctx context.Context, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.sample(start)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the function once; a failed read is skipped, the run goes
// on without it.
func (s *platformSampler) sample(start time.Time) {
	var st adminapi.Status
	if _, err := s.c.get(s.path, &st); err != nil {
		return
	}
	sum, _ := summarySince(s.c, s.path, start) // without records, no cold starts
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == load.MaxSeconds {
		return // a day of samples: a longer run keeps its first day
	}
	s.samples = append(s.samples, report.PlatformSample{At: time.Since(start).Round(time.Millisecond), State: string(st.State),
		Desired: st.Desired, Ready: st.Ready, Starting: st.Starting, Buffered: st.Buffered, Panic: st.Panic,
		QueueDepth: st.QueueDepth, ColdStarts: sum.Total.ColdStarts})
}

// end stops the sampling with a last sample, so a run shorter than a
// second still shows the platform at its end.
func (s *platformSampler) end(stop context.CancelFunc, start time.Time) []report.PlatformSample {
	if s == nil {
		stop()
		return nil
	}
	stop()
	s.sample(start)
	return s.all()
}

func (s *platformSampler) last() (report.PlatformSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return report.PlatformSample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

func (s *platformSampler) all() []report.PlatformSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// progressLine shows the run as it goes: rewritten in place on a
// terminal, a plain line every 5 seconds otherwise.
type progressLine struct {
	w        io.Writer
	terminal bool
	sampler  *platformSampler
	shown    bool
}

func newProgressLine(w io.Writer, s *platformSampler) *progressLine {
	p := &progressLine{w: w, sampler: s}
	if f, ok := w.(*os.File); ok {
		p.terminal = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progressLine) show(pr load.Progress) {
	sec := int(pr.Elapsed.Seconds())
	if !p.terminal && sec%5 != 0 {
		return
	}
	line := fmt.Sprintf("%3ds  %7.0f req/s  p99 %-9v  %d answers  %d errors", sec, pr.Rate, pr.P99.Round(time.Microsecond), pr.Requests, pr.Errors)
	if p.sampler != nil {
		if s, ok := p.sampler.last(); ok {
			line += fmt.Sprintf("  instances %d/%d (%s)  buffered %d  cold starts %d", s.Ready, s.Desired, s.State, s.Buffered, s.ColdStarts)
			if s.Panic {
				line += "  panic"
			}
		}
	}
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progressLine) end() {
	if p.shown {
		fmt.Fprintln(p.w)
	}
}

// compareRuns prints two --json runs side by side.
func compareRuns(w io.Writer, fileA, fileB string) error {
	a, err := report.ReadJSON(fileA)
	if err != nil {
		return usageError{fmt.Errorf("--compare: %w", err)}
	}
	b, err := report.ReadJSON(fileB)
	if err != nil {
		return usageError{fmt.Errorf("--compare: %w", err)}
	}
	return report.Compare(w, fileA, fileB, a, b)
}

// maxMessages bounds --messages.
const maxMessages = 10_000_000

// runQueue publishes messages and reports the drain, with the function's
// instances when --function names it.
func runQueue(ctx context.Context, cmd *cobra.Command, c *adminClient, f loadFlags) error {
	body, err := f.readBody()
	if err != nil {
		return err
	}
	o := queue.Options{URL: f.amqpURL, Queue: f.queue, Messages: f.messages, Body: body, MaxWait: f.duration, Declare: f.declareQueue}
	if !cmd.Flags().Changed("duration") {
		o.MaxWait = 10 * time.Minute // the default run length is for HTTP
	}
	run := report.Run{URL: f.amqpURL + " queue " + f.queue, Started: time.Now()}
	var sampler *platformSampler
	if f.function != "" {
		_, _, path := functionPath(f.function)
		if _, err := c.get(path, nil); err != nil {
			return usageError{fmt.Errorf("--function %s: %w", f.function, err)}
		}
		sampler = &platformSampler{c: c, path: path}
		o.Processed = handledSince(c, path, run.Started)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if sampler != nil {
		go sampler.run(ctx, run.Started)
	}
	w := cmd.ErrOrStderr()
	o.Progress = func(p queue.Progress) {
		if int(p.Elapsed.Seconds())%5 == 0 {
			fmt.Fprintf(w, "%3ds  %d ready  %d handled\n", int(p.Elapsed.Seconds()), p.Ready, p.Processed)
		}
	}
	res, err := queue.Run(ctx, o)
	run.Queue = &res
	run.Platform = sampler.end(stop, run.Started)
	if err != nil && !errors.Is(err, queue.ErrNotDrained) {
		return err
	}
	if werr := report.Summary(cmd.OutOrStdout(), run); werr != nil {
		return werr
	}
	if werr := f.write(cmd, run); werr != nil {
		return werr
	}
	return err
}

// handledSince counts the function's RabbitMQ invocations answered 2xx
// since start, from the admin API's summary of its records.
func handledSince(c *adminClient, path string, start time.Time) func(context.Context) (int64, error) {
	return func(context.Context) (int64, error) {
		sum, err := summarySince(c, path, start)
		if err != nil {
			return 0, err
		}
		for _, t := range sum.Triggers {
			if t.Trigger == "rabbitmq" {
				return t.Count - t.Errors, nil
			}
		}
		return 0, nil
	}
}

// summarySince is the summary of the function's records since start.
func summarySince(c *adminClient, path string, start time.Time) (invocation.Summary, error) {
	window := time.Since(start).Round(time.Millisecond) + time.Millisecond
	var sum invocation.Summary
	_, err := c.get(fmt.Sprintf("%s/invocations/summary?window=%dms", path, window.Milliseconds()), &sum)
	return sum, err
}
