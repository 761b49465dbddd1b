// Command gen-metricsdoc writes docs/metrics.md from the metrics the
// components register: it builds each component as its command does, asks
// every collector for its descriptions, and prints a table per component.
// `make generate` runs it and `make verify` fails when the page is stale,
// so the page cannot drift from the code.
//
// Usage: gen-metricsdoc FILE
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sless.dev/sless/activator"
	"sless.dev/sless/autoscaler"
	"sless.dev/sless/autoscaler/scheduler"
	"sless.dev/sless/autoscaler/shard"
	"sless.dev/sless/benchmarks/hops"
	"sless.dev/sless/internal/wire"
	"sless.dev/sless/invocation"
	"sless.dev/sless/invocation/postgres"
	"sless.dev/sless/local"
	"sless.dev/sless/queueproxy"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "gen-metricsdoc: usage: gen-metricsdoc FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gen-metricsdoc:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	comps, err := components()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	write(&b, comps)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// component is a process (or part of one) and the sless series it exports.
type component struct {
	name, where string
	metrics     []metric
}

type metric struct {
	name, kind, help string
	labels           []string
}

// components builds every component against registries of its own, in
// the order the page lists them; sless dev lists only what the others
// do not export.
func components() ([]component, error) {
	log := slog.New(slog.DiscardHandler)
	builders := []struct {
		name, where string
		build       func(reg *prometheus.Registry) error
	}{
		{"activator", "`sless activator` (admin port `:9090`) and `sless dev`", func(reg *prometheus.Registry) error {
			_, err := activator.New(activator.Config{}, hops.NopPoker{}, invocation.NewRing(1), reg, log)
			return err
		}},
		{"queue-proxy", fmt.Sprintf("every instance's `sless queue-proxy` (admin port `:%d`); in `sless dev` on the platform's page, with the label `instance`", wire.AdminPort), func(reg *prometheus.Registry) error {
			// Consumers and the records sender register only when
			// configured: configure both.
			qp, err := queueproxy.New(queueproxy.Config{Namespace: "ns", Function: "fn", RecordsURL: "http://127.0.0.1:1",
				RabbitMQ: []queueproxy.RabbitMQ{{RabbitMQTrigger: wire.RabbitMQTrigger{Name: "t", Queue: "q"}}}}, log)
			if err != nil {
				return err
			}
			return reg.Register(qp.Gatherer().(prometheus.Collector))
		}},
		{"autoscaler", "`sless autoscaler` (`:9090`) and `sless dev`; a replica of several exports the series of the functions it scales, its share", func(reg *prometheus.Registry) error {
			if _, err := autoscaler.New(autoscaler.NewScraper(time.Second), nil, reg, log); err != nil {
				return err
			}
			if err := reg.Register(shard.HeldGauge(func() int { return 0 })); err != nil {
				return err
			}
			_, err := scheduler.NewMetrics(reg)
			return err
		}},
		{"invocation records", "whatever writes records to PostgreSQL (`--database-url`): `sless activator` and `sless dev`", func(reg *prometheus.Registry) error {
			// Open registers its series before it connects; nothing
			// listens on port 1, so it stops there.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if s, err := postgres.Open(ctx, "postgres://127.0.0.1:1/none?connect_timeout=1", reg, postgres.Options{}); err == nil {
				s.Close()
			}
			return nil
		}},
		{"sless dev", "`sless dev` alone: the processes it runs and the builds it makes (on Kubernetes, the kubelet's and the image build's)", func(reg *prometheus.Registry) error {
			// Never run: its listeners go when this command exits.
			_, err := local.New(local.Options{Dir: os.TempDir(), Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Out: io.Discard, Log: log, Registry: reg})
			return err
		}},
	}
	seen := map[string]bool{}
	var out []component
	for _, b := range builders {
		reg := prometheus.NewRegistry()
		if err := b.build(reg); err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		ms, err := describe(reg, seen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		if len(ms) == 0 {
			return nil, fmt.Errorf("%s: no sless series registered", b.name)
		}
		out = append(out, component{name: b.name, where: b.where, metrics: ms})
	}
	return out, nil
}

// descRE reads a prometheus.Desc's String, the only form in which the
// library shows a description's labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)", unit: "[^"]*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// describe lists reg's sless series not in seen, adding them to it.
func describe(reg *prometheus.Registry, seen map[string]bool) ([]metric, error) {
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	var out []metric
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			return nil, fmt.Errorf("cannot read description %s", d)
		}
		if !strings.HasPrefix(m[1], "sless_") || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		help := strings.ReplaceAll(m[2], `\"`, `"`)
		var labels []string // the function's first, then the series' own
		if strings.Contains(m[3], "function=") {
			labels = []string{"namespace", "function"}
		}
		for _, pair := range strings.Split(m[3], ",") {
			if name, _, ok := strings.Cut(pair, "="); ok && !slices.Contains(labels, name) {
				labels = append(labels, name)
			}
		}
		for _, l := range strings.Split(m[4], ",") {
			if l != "" {
				labels = append(labels, l)
			}
		}
		out = append(out, metric{name: m[1], kind: kind(m[1]), help: help, labels: labels})
	}
	slices.SortFunc(out, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// kind is a series' type by the naming rules every sless series follows
// (a test checks them against the types a scrape reports): counters end in
// _total, histograms in _seconds (but ages, _age_seconds, are gauges), and
// the rest are gauges.
func kind(name string) string {
	switch {
	case strings.HasSuffix(name, "_total"):
		return "counter"
	case strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_age_seconds"):
		return "histogram"
	}
	return "gauge"
}

func write(w io.Writer, comps []component) {
	fmt.Fprint(w, header)
	for _, c := range comps {
		fmt.Fprintf(w, "\n## %s\nExported by %s.\n\n| name | type | labels | meaning |\n|---|---|---|---|\n", c.name, c.where)
		for _, m := range c.metrics {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", m.name, m.kind, codes(m.labels), strings.ReplaceAll(m.help, "|", `\|`))
		}
	}
}

func codes(labels []string) string {
	q := make([]string, len(labels))
	for i, l := range labels {
		q[i] = "`" + l + "`"
	}
	return strings.Join(q, ", ")
}

const header = `# Metrics

<!-- Generated by hack/gen-metricsdoc from the components' registries (make generate); do not edit. -->

Every series sless exports, by the component that exports it. Prometheus
scrapes them from each component's admin port; ` + "`sless dev`" + ` serves all of
them on one page (` + "`/metrics`" + ` on ` + "`--admin`" + `). The rules and the
dashboard built on them are in ` + "`config/prometheus`" + ` and ` + "`config/grafana`" + `
([observability](observability.md)).

Labels: ` + "`namespace`" + ` and ` + "`function`" + ` name the function; ` + "`code`" + ` is
an HTTP status, ` + "`reason`" + `, ` + "`result`" + `, ` + "`queue`" + ` and ` + "`trigger`" + ` what
their series say. No series is labelled with a pod address, a path or a
request id. Histograms, never summaries, so that percentiles aggregate
across instances. Series made on a first event (a rejection, a crash, a
failed build) appear only once it happened; a function's series go when
it is removed.
`
