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
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/load"
)

// loadFlags are the flags of `sless load`.
type loadFlags struct {
	function, rate, body, bodyFile, jsonFile, method string
	headers                                          []string
	connections                                      int
	requests                                         int64
	duration, warmup, timeout                        time.Duration
	allowRemote                                      bool
	compare                                          bool
}

// loadRun is what --json writes and --compare reads.
type loadRun struct {
	URL     string    `json:"url"`
	Started time.Time `json:"started"`
	// Rate is the open-loop rate or steps; empty for a closed loop.
	Rate        string `json:"rate,omitempty"`
	Connections int    `json:"connections"`
	Result      load.Result
	// Platform is the function as the admin API showed it, each second.
	Platform []platformSample `json:"platform,omitempty"`
}

// platformSample is the function as the platform saw it at one second of
// the run.
type platformSample struct {
	At         time.Duration `json:"atNs"`
	State      string        `json:"state"`
	Desired    int           `json:"desired"`
	Ready      int           `json:"ready"`
	Starting   int           `json:"starting"`
	Buffered   int           `json:"buffered"`
	Panic      bool          `json:"panic,omitempty"`
	QueueDepth int64         `json:"queueDepth,omitempty"`
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
	fl.BoolVar(&f.compare, "compare", false, "compare two --json files: sless load --compare a.json b.json")
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
	return nil
}

// options turns the flags into a run's options; a bad body file or
// target is a usage error.
func (f *loadFlags) options(target string) (load.Options, error) {
	o := load.Options{URL: target, Method: f.method, Connections: f.connections, Duration: f.duration,
		Requests: f.requests, Warmup: f.warmup, Timeout: f.timeout, AllowRemote: f.allowRemote, Body: []byte(f.body)}
	if f.bodyFile != "" {
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return o, usageError{fmt.Errorf("--body-file: %w", err)}
		}
		o.Body = b
	}
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
	return o, nil
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
	if _, err := load.CheckTarget(target, f.allowRemote); err != nil {
		return usageError{err}
	}
	if err := reachable(ctx, target); err != nil {
		return usageError{err}
	}
	var sampler *platformSampler
	if fnPath != "" {
		sampler = &platformSampler{c: c, path: fnPath}
	}
	progress := newProgressLine(cmd.ErrOrStderr(), sampler)
	o.Progress = progress.show
	run := loadRun{URL: target, Started: time.Now(), Rate: f.rate, Connections: f.connections}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if sampler != nil {
		go sampler.run(ctx, run.Started.Add(f.warmup))
	}
	run.Result, err = load.Run(ctx, o)
	stop()
	progress.end()
	if err != nil {
		return err
	}
	if sampler != nil {
		run.Platform = sampler.all()
	}
	summarize(cmd.OutOrStdout(), run)
	if f.jsonFile != "" {
		raw, err := json.MarshalIndent(run, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonFile, raw, 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if c.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(run)
	}
	return nil
}

// resolveTarget is the URL to load and, when it names a function, the
// function's admin API path.
func resolveTarget(c *adminClient, f loadFlags, args []string) (target, fnPath string, err error) {
	if f.function != "" {
		_, _, fnPath = functionPath(f.function)
		var st adminapi.Function
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
		fnPath = "/v1/namespaces/" + url.PathEscape(parts[1]) + "/functions/" + url.PathEscape(parts[2])
	}
	return args[0], fnPath, nil
}

// reachable dials the target once, so a wrong address is an error at
// once rather than a run of connection errors.
func reachable(ctx context.Context, target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", target, err)
	}
	return conn.Close()
}

// platformSampler reads the function from the admin API each second.
type platformSampler struct {
	c    *adminClient
	path string

	mu      sync.Mutex
	samples []platformSample
	failed  bool // the API did not answer: the run goes on without it
}

func (s *platformSampler) run(ctx context.Context, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		var st adminapi.Function
		if _, err := s.c.get(s.path, &st); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, platformSample{At: time.Since(start).Round(time.Millisecond), State: st.State,
				Desired: st.Desired, Ready: st.Ready, Starting: st.Starting, Buffered: st.Buffered, Panic: st.Panic,
				QueueDepth: st.QueueDepth})
			s.mu.Unlock()
		} else if ctx.Err() == nil {
			s.mu.Lock()
			s.failed = true
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *platformSampler) last() (platformSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return platformSample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

func (s *platformSampler) all() []platformSample {
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
			line += fmt.Sprintf("  instances %d/%d (%s)  buffered %d", s.Ready, s.Desired, s.State, s.Buffered)
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

// summarize prints a run's figures.
func summarize(w io.Writer, r loadRun) {
	res := r.Result
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s\n", r.URL)
	mode := "closed loop, " + fmt.Sprint(r.Connections) + " connections"
	if r.Rate != "" {
		mode = "open loop, rate " + r.Rate + " (latency from each request's intended send time)"
	}
	fmt.Fprintf(tw, "mode\t%s\n", mode)
	fmt.Fprintf(tw, "duration\t%v\n", res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "answers\t%d (%.1f/s)\n", res.Requests, res.Throughput)
	fmt.Fprintf(tw, "latency\tp50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n", ms(res.Latency.P50), ms(res.Latency.P90),
		ms(res.Latency.P99), ms(res.Latency.P999), ms(res.Latency.Max))
	fmt.Fprintf(tw, "status codes\t%s\n", countsOf(res.Codes))
	if res.Errors > 0 {
		fmt.Fprintf(tw, "errors\t%d: %s\n", res.Errors, countsOf(res.TransportErrors))
	}
	if n := len(r.Platform); n > 0 {
		peak, buffered, panicked := 0, 0, 0
		for _, s := range r.Platform {
			peak, buffered = max(peak, s.Ready), max(buffered, s.Buffered)
			if s.Panic {
				panicked++
			}
		}
		fmt.Fprintf(tw, "instances\tready at most %d, at the end %d of %d desired\n", peak, r.Platform[n-1].Ready, r.Platform[n-1].Desired)
		fmt.Fprintf(tw, "platform\tat most %d requests buffered; %d of %d seconds in panic mode\n", buffered, panicked, n)
	}
	_ = tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// countsOf lists counts by key, in key order: "200: 981, 503: 19".
func countsOf[K int | string](m map[K]int64) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%v: %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// compareRuns prints two --json runs side by side, with b's figures as a
// ratio of a's.
func compareRuns(w io.Writer, fileA, fileB string) error {
	a, err := readRun(fileA)
	if err != nil {
		return err
	}
	b, err := readRun(fileB)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t%s\tb/a\t\n", fileA, fileB)
	row := func(name string, x, y float64, unit string) {
		ratio := "-"
		if x != 0 {
			ratio = fmt.Sprintf("%.2fx", y/x)
		}
		fmt.Fprintf(tw, "%s\t%.2f%s\t%.2f%s\t%s\t\n", name, x, unit, y, unit, ratio)
	}
	ra, rb := a.Result, b.Result
	row("answers/s", ra.Throughput, rb.Throughput, "")
	for _, p := range []struct {
		name string
		x, y time.Duration
	}{{"p50", ra.Latency.P50, rb.Latency.P50}, {"p90", ra.Latency.P90, rb.Latency.P90}, {"p99", ra.Latency.P99, rb.Latency.P99},
		{"p99.9", ra.Latency.P999, rb.Latency.P999}, {"max", ra.Latency.Max, rb.Latency.Max}} {
		row(p.name, float64(p.x)/1e6, float64(p.y)/1e6, "ms")
	}
	row("errors", float64(ra.Errors), float64(rb.Errors), "")
	row("non-2xx", float64(non2xx(ra.Codes)), float64(non2xx(rb.Codes)), "")
	return tw.Flush()
}

func non2xx(codes map[int]int64) int64 {
	var n int64
	for c, k := range codes {
		if c < 200 || c > 299 {
			n += k
		}
	}
	return n
}

func readRun(file string) (loadRun, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return loadRun{}, usageError{fmt.Errorf("--compare: %w", err)}
	}
	var r loadRun
	if err := json.Unmarshal(raw, &r); err != nil || r.Result.Histogram == nil {
		return loadRun{}, usageError{fmt.Errorf("--compare: %s is not a sless load --json file", file)}
	}
	return r, nil
}
