package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/invocation"
	"sless.dev/sless/local"
)

func newFunctionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "functions",
		Short: "List the functions, their state, instances and URL",
		Args:  cobra.NoArgs,
	}
	c := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var list adminapi.List[local.FunctionStatus]
		raw, err := c.get("/v1/functions", &list)
		if err != nil {
			return err
		}
		if c.output == "json" {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		// First, on stderr: a manifest that does not load changes
		// nothing, and the table alone would not say so.
		for _, e := range list.Errors {
			fmt.Fprintf(cmd.ErrOrStderr(), "manifest error: %s\n", strings.TrimPrefix(e.File+": "+e.Error, ": "))
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tRUNTIME\tSTATE\tREADY\tURL\tAGE")
		for _, f := range list.Functions {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d/%d\t%s\t%s\n", f.Namespace, f.Name, f.RuntimeShown(), stateOf(f), f.Ready, f.Desired, f.URL, age(f.Created))
		}
		return tw.Flush()
	}
	return cmd
}

// stateOf is a function's state with its update's, as the table shows it.
func stateOf(f local.FunctionStatus) string {
	if f.Update != "" {
		return string(f.State) + ", update " + f.Update
	}
	return string(f.State)
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func newDescribeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe NAMESPACE/NAME",
		Short: "Show a function: state, triggers, spec, instances, last crash and build error, recent invocations",
		Args:  cobra.ExactArgs(1),
	}
	c := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		_, _, path := functionPath(args[0])
		var st local.FunctionStatus
		raw, err := c.get(path, &st)
		if err != nil {
			return err
		}
		var page invocation.Page
		rawInv, invErr := c.get(path+"/invocations?limit=10", &page)
		out := cmd.OutOrStdout()
		if c.output == "json" {
			if invErr != nil {
				return invErr
			}
			_, err := fmt.Fprintf(out, "{\"function\":%s,\"invocations\":%s}\n", strings.TrimSpace(string(raw)), strings.TrimSpace(string(rawInv)))
			return err
		}
		describe(out, st, page.Invocations, invErr)
		return nil
	}
	return cmd
}

// describe shows a function in sections, as kubectl describe does.
func describe(w io.Writer, st local.FunctionStatus, recent []invocation.Record, recentErr error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", name, strings.ReplaceAll(strings.TrimRight(value, "\n"), "\n", "\n\t"))
		}
	}
	field("Name", st.Namespace+"/"+st.Name)
	field("Runtime", st.RuntimeShown())
	field("Manifest", st.File)
	field("URL", st.URL)
	field("Age", age(st.Created))
	field("State", string(st.State))
	field("Reason", st.Reason)
	field("Error", st.Error)
	if st.Update != "" {
		field("Update", st.Update+": "+st.UpdateError)
	}
	field("Build error", st.BuildError)
	field("Replicas", fmt.Sprintf("%d ready, %d starting, %d desired", st.Ready, st.Starting, st.Desired))
	field("Crashes", fmt.Sprint(st.Crashes))
	field("Last crash", st.LastCrash)
	if st.LastStartupMs > 0 {
		field("Last start-up", fmt.Sprintf("%.1f ms", st.LastStartupMs))
	}
	_ = tw.Flush()

	describeTriggers(w, st.Triggers)
	fmt.Fprintln(w, "Spec:")
	if spec, err := yaml.Marshal(st.Spec); err == nil {
		for line := range strings.Lines(string(spec)) {
			fmt.Fprint(w, "  ", line)
		}
	}
	fmt.Fprintln(w, "Instances:")
	if len(st.Instances) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tSTATE\tGENERATION\tAGE\tADDR")
		for _, in := range st.Instances {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", in.Name, in.State, in.Generation, age(in.Started), cmp.Or(in.Addr, "-"))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w, "Recent invocations:")
	switch {
	case recentErr != nil:
		fmt.Fprintf(w, "  <unavailable: %v>\n", recentErr)
	case len(recent) == 0:
		fmt.Fprintln(w, "  <none>")
	default:
		invocationsTable(&indented{w: w}, recent)
	}
}

// describeTriggers shows each trigger, what fires it, its state and, when
// it fails, why.
func describeTriggers(w io.Writer, triggers []adminapi.TriggerStatus) {
	fmt.Fprintln(w, "Triggers:")
	if len(triggers) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tKIND\tSTATE\tSOURCE\tERROR")
	for _, t := range triggers {
		source := "-"
		switch {
		case t.Queue != "":
			source = "queue " + t.Queue
		case t.Schedule != "":
			source = strings.TrimSpace(t.Schedule + " " + t.Timezone)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, t.State, source,
			cmp.Or(strings.Join(strings.Fields(t.Error), " "), "-"))
	}
	_ = tw.Flush()
}

// indented writes each line it is given two spaces in.
type indented struct {
	w   io.Writer
	mid bool // within a line
}

func (i *indented) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		if !i.mid {
			if _, err := io.WriteString(i.w, "  "); err != nil {
				return 0, err
			}
		}
		if _, err := io.WriteString(i.w, line); err != nil {
			return 0, err
		}
		i.mid = !strings.HasSuffix(line, "\n")
	}
	return len(p), nil
}

func invocationsTable(w io.Writer, recs []invocation.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START\tTRIGGER\tSTATUS\tDURATION\tCOLD\tINSTANCE\tREQUEST ID\tERROR")
	for _, r := range recs {
		trigger := r.Trigger
		if r.TriggerName != "" {
			trigger += "/" + r.TriggerName
		}
		cold := "-"
		if r.ColdStart {
			cold = r.ColdStartWait.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Start.Local().Format("15:04:05.000"), trigger, r.Status,
			r.Duration.Round(10*time.Microsecond), cold, r.Instance, r.RequestID, r.Error)
	}
	_ = tw.Flush()
}

func newInvocationsCommand() *cobra.Command {
	var limit int
	var status, trigger, since string
	cmd := &cobra.Command{
		Use:   "invocations NAMESPACE/NAME",
		Short: "List a function's latest invocation records",
		Args:  cobra.ExactArgs(1),
	}
	c := adminFlags(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "records to show")
	cmd.Flags().StringVar(&status, "status", "", "only this HTTP status")
	cmd.Flags().StringVar(&trigger, "trigger", "", "only http, cron or rabbitmq")
	cmd.Flags().StringVar(&since, "since", "", "only records since a time (RFC 3339) or an age (15m)")
	cmd.Flags().Bool("json", false, "the API's JSON (as -o json)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if j, _ := cmd.Flags().GetBool("json"); j {
			c.output = "json"
		}
		_, _, path := functionPath(args[0])
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		for k, v := range map[string]string{"status": status, "trigger": trigger, "since": since} {
			if v != "" {
				q.Set(k, v)
			}
		}
		var page invocation.Page
		raw, err := c.get(path+"/invocations?"+q.Encode(), &page)
		if err != nil {
			return err
		}
		if len(page.Invocations) == 0 {
			// The records of a function removed since are kept, and
			// shown; none, and no such function, is a misspelt name.
			if _, err := c.get(path, nil); err != nil {
				return err
			}
		}
		if c.output == "json" {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		invocationsTable(cmd.OutOrStdout(), page.Invocations)
		return nil
	}
	return cmd
}

func newLogsCommand() *cobra.Command {
	var follow bool
	var since string
	var tail int
	cmd := &cobra.Command{
		Use:   "logs NAMESPACE/NAME",
		Short: "Print a function's output (its instances' stdout and stderr)",
		Args:  cobra.ExactArgs(1),
	}
	c := adminFlags(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing new lines until interrupted")
	cmd.Flags().StringVar(&since, "since", "", "only lines since an age (5m) or a time (RFC 3339)")
	cmd.Flags().IntVar(&tail, "tail", 0, "only the last N lines kept, all by default (0: none; with -f, only new lines)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ns, name, path := functionPath(args[0])
		q := url.Values{}
		if since != "" {
			q.Set("since", since)
		}
		if cmd.Flags().Changed("tail") {
			if tail < 0 {
				return usageError{fmt.Errorf("--tail %d: want 0 or more", tail)}
			}
			q.Set("tail", fmt.Sprint(tail))
		}
		out := cmd.OutOrStdout()
		if !follow {
			var l struct{ Lines []local.LogLine }
			raw, err := c.get(path+"/logs?"+q.Encode(), &l)
			if err != nil {
				return err
			}
			if c.output == "json" {
				_, err := out.Write(raw)
				return err
			}
			for _, ll := range l.Lines {
				fmt.Fprintf(out, "%s | %s\n", ll.Instance, ll.Line)
			}
			return nil
		}
		q.Set("follow", "true")
		return c.follow(cmd, ns+"/"+name, path+"/logs?"+q.Encode(), out)
	}
	return cmd
}

// follow prints fn's followed log stream until it ends, the function is
// removed, or the command is interrupted.
func (c *adminClient) follow(cmd *cobra.Command, fn, path string, out io.Writer) error {
	resp, err := c.do(path, &http.Client{}) // no timeout: it streams
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return c.apiError(resp.StatusCode, body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ll local.LogLine
		err := json.Unmarshal(sc.Bytes(), &ll)
		if c.output == "json" {
			fmt.Fprintln(out, sc.Text())
		}
		if err == nil && ll.Removed {
			return fmt.Errorf("function %s was removed: no more lines will come", fn)
		}
		if c.output == "json" || err != nil {
			continue
		}
		if ll.Dropped > 0 {
			fmt.Fprintf(out, "(%d lines dropped: reading too slowly)\n", ll.Dropped)
		}
		if ll.Instance != "" { // else it only reports a drop
			fmt.Fprintf(out, "%s | %s\n", ll.Instance, ll.Line)
		}
	}
	if cmd.Context().Err() != nil {
		return nil // interrupted: the way a follow ends
	}
	// The stream ends only with the server: cleanly, or cut short
	// (unexpected EOF) when it closed the connection.
	if err := sc.Err(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the admin API ended the log stream: has `sless dev` stopped? (%w)", err)
	}
	return errors.New("the admin API ended the log stream: has `sless dev` stopped?")
}

func newInvokeCommand() *cobra.Command {
	var data, method, save string
	var headers []string
	var async, wait bool
	cmd := &cobra.Command{
		Use:   "invoke NAMESPACE/NAME [PATH]",
		Short: "Invoke a function and print the status, timing and body",
		Args:  cobra.RangeArgs(1, 2),
	}
	c := adminFlags(cmd)
	cmd.Flags().StringVarP(&data, "data", "d", "", "the request body, or @FILE to send a file as it is, or @- to send standard input")
	cmd.Flags().StringVarP(&method, "request", "X", "", "the method (GET, or POST with a body)")
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "a request header, 'Name: value' (repeatable)")
	cmd.Flags().StringVar(&save, "save", "", "write the answer's body to this file (- : to the terminal, binary or not)")
	cmd.Flags().BoolVar(&async, "async", false, "submit the request as a run (Prefer: respond-async) and print its id")
	cmd.Flags().BoolVar(&wait, "wait", false, "with --async, follow the run to its end and print the function's answer")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if wait && !async {
			return usageError{errors.New("--wait follows a run: it goes with --async")}
		}
		if async && c.output == "json" {
			return usageError{errors.New("-o json is for an invocation waited on; `sless run ID -o json` shows a run")}
		}
		_, _, path := functionPath(args[0])
		var st local.FunctionStatus
		if _, err := c.get(path, &st); err != nil {
			return err
		}
		req, err := invokeRequest(cmd.Context(), st.URL, args[1:], method, data, headers, cmd.InOrStdin())
		if err != nil {
			return usageError{err}
		}
		if async {
			return invokeAsync(cmd.Context(), cmd.OutOrStdout(), req, wait, save)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("invoke %s/%s: %w", st.Namespace, st.Name, err)
		}
		defer resp.Body.Close()
		out := cmd.OutOrStdout()
		if c.output == "json" {
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("invoke %s/%s: reading the answer: %w", st.Namespace, st.Name, err)
			}
			j, _ := json.Marshal(map[string]any{"status": resp.StatusCode, "durationMs": float64(time.Since(start).Microseconds()) / 1000,
				"headers": resp.Header, "body": string(body)})
			fmt.Fprintln(out, string(j))
		} else {
			// The status and the time to the head at once, then the body as
			// it arrives: a stream's events show as the function sends them.
			fmt.Fprintf(out, "%s in %s\n", resp.Status, time.Since(start).Round(10*time.Microsecond))
			dst, closeDst, err := bodyDestination(out, save)
			if err != nil {
				return err
			}
			w := &lastByte{w: dst}
			_, err = io.Copy(w, resp.Body)
			err = errors.Join(err, closeDst())
			if (save == "" || save == "-") && w.last != 0 && w.last != '\n' {
				fmt.Fprintln(out) // the body went to out: end its line
			}
			if errors.Is(err, errBinary) {
				return fmt.Errorf("the answer is binary (%s): not written to the terminal; --save FILE writes it to a file, --save - here anyway",
					cmp.Or(resp.Header.Get("Content-Type"), "no Content-Type"))
			}
			if err != nil {
				return fmt.Errorf("invoke %s/%s: the answer was cut: %w", st.Namespace, st.Name, err)
			}
		}
		if resp.StatusCode >= 300 {
			return fmt.Errorf("the function answered %s", resp.Status)
		}
		return nil
	}
	return cmd
}

// requestBody is -d's body and its size (-1: unknown, sent chunked), as
// curl's --data-binary: the text given, @FILE's bytes unchanged, or @-'s
// standard input; a file and stdin are streamed as read, not held.
func requestBody(data string, stdin io.Reader) (io.Reader, int64, error) {
	file, ok := strings.CutPrefix(data, "@")
	switch {
	case !ok:
		return strings.NewReader(data), int64(len(data)), nil
	case file == "-":
		return io.NopCloser(stdin), -1, nil // the client closes a body: not stdin
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, fmt.Errorf("-d: %w", err)
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("-d @%s: %w", file, err)
	}
	return f, info.Size(), nil // the client closes it
}

// errBinary is textOnly's refusal.
var errBinary = errors.New("binary output to a terminal")

// bodyDestination is where invoke writes an answer's body: the file save
// names, out as it is for "-", or out refusing binary when it is a
// terminal, as curl does: bytes a terminal takes for control sequences
// can leave it unusable.
func bodyDestination(out io.Writer, save string) (io.Writer, func() error, error) {
	switch save {
	case "-":
		return out, func() error { return nil }, nil
	case "":
		if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return textOnly{out}, func() error { return nil }, nil
		}
		return out, func() error { return nil }, nil
	}
	f, err := os.Create(save)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--save: %w", err)}
	}
	return f, f.Close, nil
}

// textOnly writes text and refuses a write holding a NUL byte, the mark
// of binary content that curl goes by.
type textOnly struct{ w io.Writer }

func (t textOnly) Write(p []byte) (int, error) {
	if bytes.IndexByte(p, 0) >= 0 {
		return 0, errBinary
	}
	return t.w.Write(p)
}

// lastByte is a writer that remembers the last byte written through it.
type lastByte struct {
	w    io.Writer
	last byte
}

func (l *lastByte) Write(p []byte) (int, error) {
	if len(p) > 0 {
		l.last = p[len(p)-1]
	}
	return l.w.Write(p)
}

func invokeRequest(ctx context.Context, fnURL string, rest []string, method, data string, headers []string, stdin io.Reader) (*http.Request, error) {
	target := fnURL
	if len(rest) == 1 {
		target += "/" + strings.TrimPrefix(rest[0], "/")
	}
	var body io.Reader
	size := int64(-1)
	if data != "" {
		b, n, err := requestBody(data, stdin)
		if err != nil {
			return nil, err
		}
		body, size = b, n
		if method == "" {
			method = http.MethodPost
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("-H %q: want 'Name: value'", h)
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return req, nil
}
