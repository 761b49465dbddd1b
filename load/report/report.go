// Package report keeps a `sless load` run: its file (--json), its summary
// and comparison tables, and its report (--report): PNG plots drawn with
// gonum/plot and a Markdown page that embeds them.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sless.dev/sless/load"
	"sless.dev/sless/load/queue"
)

// Run is one `sless load` run: what --json writes and --compare reads.
type Run struct {
	URL     string    `json:"url"`
	Started time.Time `json:"started"`
	// Rate is the open-loop rate or steps; empty for a closed loop.
	Rate        string      `json:"rate,omitempty"`
	Connections int         `json:"connections"`
	Result      load.Result `json:"result"`
	// Platform is the function as the admin API showed it, each second.
	Platform []PlatformSample `json:"platform,omitempty"`
	// Queue is a --queue run's drain; Result is then empty.
	Queue *queue.Result `json:"queue,omitempty"`
}

// PlatformSample is the function as the platform saw it at one second of
// the run.
type PlatformSample struct {
	At         time.Duration `json:"atNs"`
	State      string        `json:"state"`
	Desired    int           `json:"desired"`
	Ready      int           `json:"ready"`
	Starting   int           `json:"starting"`
	Buffered   int           `json:"buffered"`
	Panic      bool          `json:"panic,omitempty"`
	QueueDepth int64         `json:"queueDepth,omitempty"`
	// ColdStarts counts the invocations since the run began that waited
	// for an instance to start from zero (the platform's records).
	ColdStarts int64 `json:"coldStarts"`
}

// WriteJSON writes r to file.
func WriteJSON(file string, r Run) error {
	raw, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		return fmt.Errorf("write run: %w", err)
	}
	return nil
}

// ErrNotRun is the error of a file that is not a run's.
var ErrNotRun = errors.New("not a sless load --json file")

// ReadJSON reads a run WriteJSON wrote.
func ReadJSON(file string) (Run, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return Run{}, err
	}
	var r Run
	if err := json.Unmarshal(raw, &r); err != nil || (r.Result.Histogram == nil && r.Queue == nil) {
		return Run{}, fmt.Errorf("%s: %w", file, ErrNotRun)
	}
	return r, nil
}

// Mode says how the run sent its load.
func (r Run) Mode() string {
	if q := r.Queue; q != nil {
		return fmt.Sprintf("%d messages published to queue %s", q.Messages, q.Queue)
	}
	if r.Rate != "" {
		return "open loop, rate " + r.Rate + " (latency from each request's intended send time)"
	}
	return fmt.Sprintf("closed loop, %d connections", r.Connections)
}

// Summary prints r's figures as a table.
func Summary(w io.Writer, r Run) error {
	res := r.Result
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if q := r.Queue; q != nil {
		fmt.Fprintf(tw, "queue\t%s: %d messages\n", q.Queue, q.Messages)
		fmt.Fprintf(tw, "published\tin %v (%.0f/s)\n", q.Published.Round(time.Millisecond), float64(q.Messages)/q.Published.Seconds())
		how := "handled"
		if !q.ByProcessed {
			how = "off the queue (no --function: messages in flight not counted)"
		}
		if q.Drained == 0 {
			fmt.Fprintf(tw, "drained\tnot yet\n")
		} else {
			fmt.Fprintf(tw, "drained\tall %s in %v from the first publish: %.1f messages/s\n", how, q.Drained.Round(time.Millisecond), q.Rate)
		}
		platformSummary(tw, r.Platform)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "target\t%s\n", r.URL)
	fmt.Fprintf(tw, "mode\t%s\n", r.Mode())
	fmt.Fprintf(tw, "duration\t%v\n", res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "answers\t%d (%.1f/s)\n", res.Requests, res.Throughput)
	fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", ms(res.Latency.P50), ms(res.Latency.P90),
		ms(res.Latency.P99), ms(res.Latency.P999), ms(res.Latency.Max))
	fmt.Fprintf(tw, "status codes\t%s\n", counts(res.Codes))
	if res.Errors > 0 {
		fmt.Fprintf(tw, "errors\t%d: %s\n", res.Errors, counts(res.TransportErrors))
	}
	platformSummary(tw, r.Platform)
	return tw.Flush()
}

// platformSummary adds what the platform did to a summary.
func platformSummary(w io.Writer, p []PlatformSample) {
	if len(p) == 0 {
		return
	}
	peak, buffered, panicked := 0, 0, 0
	for _, s := range p {
		peak, buffered = max(peak, s.Ready), max(buffered, s.Buffered)
		if s.Panic {
			panicked++
		}
	}
	last := p[len(p)-1]
	fmt.Fprintf(w, "instances\tready at most %d, at the end %d of %d desired\n", peak, last.Ready, last.Desired)
	fmt.Fprintf(w, "platform\tat most %d requests buffered; %d of %d seconds in panic mode; %d invocations waited for a cold start\n",
		buffered, panicked, len(p), last.ColdStarts)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// counts lists counts by key, in key order: "200: 981, 503: 19".
func counts[K int | string](m map[K]int64) string {
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

// Compare prints two runs side by side, with b's figures as a ratio of
// a's.
func Compare(w io.Writer, nameA, nameB string, a, b Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t%s\tb/a\t\n", nameA, nameB)
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
