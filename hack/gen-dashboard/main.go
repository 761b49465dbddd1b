// Command gen-dashboard writes the Grafana dashboard of sless.
//
// Usage:
//
//	go run ./hack/gen-dashboard config/grafana/sless.json
//
// The dashboard is code rather than JSON edited in Grafana's UI so that
// every query in it is written once, here, next to the metric names it
// reads, and so that the generated file can be checked: a test loads
// config/grafana/sless.json, runs each of its queries against a real
// Prometheus scraping a running platform and fails on any that returns
// nothing. A renamed metric or label therefore breaks the test instead of
// silently leaving an empty panel; the dashboard cannot drift from the
// metrics. The output is deterministic, so regenerating it shows a diff only
// when this file changes.
package main

//lint:file-ignore SA1019 the v1 dashboard schema is what Grafana imports everywhere; v2 needs Grafana 12 with a feature flag.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen-dashboard:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: gen-dashboard FILE")
	}
	data, err := render()
	if err != nil {
		return err
	}
	if err := os.WriteFile(args[0], data, 0o644); err != nil {
		return fmt.Errorf("write dashboard: %w", err)
	}
	return nil
}

// render returns the dashboard as indented JSON ending in a newline.
func render() ([]byte, error) {
	d, err := build()
	if err != nil {
		return nil, fmt.Errorf("build dashboard: %w", err)
	}
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode dashboard: %w", err)
	}
	return append(data, '\n'), nil
}

// A row is a dashboard row and the panels under it.
type row struct {
	title  string
	panels []cog.Builder[dashboard.Panel]
}

func build() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("sless").
		Uid("sless").
		Tags([]string{"sless"}).
		Refresh("10s").
		Time("now-1h", "now").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(labelVariable("namespace",
			"label_values(sless_autoscaler_desired_replicas, namespace)")).
		WithVariable(labelVariable("function",
			`label_values(sless_autoscaler_desired_replicas{namespace=~"$namespace"}, function)`))
	rows := []row{traffic(), latency(), scaling(), coldStarts(), queuesAndCron(), asyncRuns(), platform()}
	for _, r := range rows {
		// Not collapsed: the row's panels follow it at the top level.
		b.WithRow(dashboard.NewRowBuilder(r.title).Collapsed(false))
		for _, p := range r.panels {
			b.WithPanel(p)
		}
	}
	d, err := b.Build()
	if err != nil {
		return d, err
	}
	numberPanels(&d)
	return d, nil
}

// numberPanels gives the panels and rows of d the ids 1, 2, … in order.
func numberPanels(d *dashboard.Dashboard) {
	for i := range d.Panels {
		id := uint32(i + 1)
		if p := d.Panels[i].Panel; p != nil {
			p.Id = &id
		}
		if r := d.Panels[i].RowPanel; r != nil {
			r.Id = id
		}
	}
}

// labelVariable returns a multi-value variable listing the values of a
// label, "All" matching any value.
func labelVariable(name, query string) *dashboard.QueryVariableBuilder {
	all := dashboard.VariableOption{
		Text:  dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
		Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
	}
	return dashboard.NewQueryVariableBuilder(name).
		Label(name).
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: &query}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(all)
}

// datasource is the Prometheus the datasource variable selects.
var datasource = common.DataSourceRef{
	Type: cog.ToPtr("prometheus"),
	Uid:  cog.ToPtr("${datasource}"),
}

// Panel sizes on Grafana's 24-column grid: three panels a line.
const (
	width  = 8
	height = 8
)

// graph returns a time series panel of queries, in unit, from zero up.
func graph(title, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Datasource(datasource).
		Unit(unit).
		Min(0).
		Legend(common.NewVizLegendOptionsBuilder().
			ShowLegend(true).
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeMulti).
			Sort(common.SortOrderDescending)).
		Span(width).
		Height(height)
	for i, q := range queries {
		p.WithTarget(q.RefId(refID(i)))
	}
	return p
}

// single returns a single-stat panel showing the last value of queries, in unit.
func single(title, unit string, queries ...*prometheus.DataqueryBuilder) *stat.PanelBuilder {
	p := stat.NewPanelBuilder().
		Title(title).
		Datasource(datasource).
		Unit(unit).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Orientation(common.VizOrientationAuto).
		Span(width).
		Height(height)
	for i, q := range queries {
		p.WithTarget(q.RefId(refID(i)))
	}
	return p
}

// refID returns the i-th target's refId: A, B, C, …
func refID(i int) string {
	return string(rune('A' + i))
}

// query returns a Prometheus query whose series are named by legend.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource).
		Expr(expr).
		LegendFormat(legend)
}

// perFunction is the legend of a series per function.
const perFunction = "{{namespace}}/{{function}}"

// sel returns the selector of metric's series of the chosen namespaces and
// functions.
func sel(metric string) string {
	return metric + `{namespace=~"$namespace", function=~"$function"}`
}

func rate(selector string) string {
	return "rate(" + selector + "[$__rate_interval])"
}

func increase(selector string) string {
	return "increase(" + selector + "[$__rate_interval])"
}

// sumBy returns the sum of expr by labels, a comma-separated list.
func sumBy(labels, expr string) string {
	return "sum by (" + labels + ") (" + expr + ")"
}

// quantile returns the q-quantile of the histogram whose bucket rates
// are expr, by labels, which must include le.
func quantile(q, labels, expr string) string {
	return "histogram_quantile(" + q + ", " + sumBy(labels, expr) + ")"
}

func traffic() row {
	return row{"Traffic", []cog.Builder[dashboard.Panel]{
		graph("Requests/s per function", "reqps",
			query(sel("namespace_function:sless_activator_requests:rate1m"), perFunction)),
		graph("Requests/s by status code", "reqps",
			query(sumBy("code", rate(sel("sless_activator_requests_total"))), "{{code}}")),
		graph("Error ratio per function", "percentunit",
			query(sel("namespace_function:sless_activator_errors:ratio_rate1m"), perFunction)).
			Max(1),
	}}
}

func latency() row {
	return row{"Latency", []cog.Builder[dashboard.Panel]{
		graph("Latency p50 and p99 per function", "s",
			query(sel("namespace_function:sless_activator_request_duration_seconds:p50_rate1m"),
				"p50 "+perFunction),
			query(sel("namespace_function:sless_activator_request_duration_seconds:p99_rate1m"),
				"p99 "+perFunction)),
		graph("Latency p90 per function", "s",
			query(quantile("0.9", "namespace, function, le",
				rate(sel("sless_activator_request_duration_seconds_bucket"))), perFunction)),
		graph("Queue-proxy latency p99 per function", "s",
			query(quantile("0.99", "namespace, function, le",
				rate(sel("sless_queueproxy_request_duration_seconds_bucket"))), perFunction)),
	}}
}

func scaling() row {
	return row{"Scaling", []cog.Builder[dashboard.Panel]{
		graph("Instances: desired, actual, ready, max", "short",
			query(sel("sless_autoscaler_desired_replicas"), "desired "+perFunction),
			query(sel("sless_autoscaler_actual_replicas"), "actual "+perFunction),
			query(sel("sless_autoscaler_ready_replicas"), "ready "+perFunction),
			query(sel("sless_autoscaler_max_replicas"), "max "+perFunction)),
		graph("Panic mode", "short",
			query(sel("sless_autoscaler_panic_mode"), perFunction)).
			Max(1),
		graph("In-flight requests vs capacity per instance", "short",
			query(sel("sless_queueproxy_inflight_requests"),
				"in flight "+perFunction+" {{instance}}"),
			query(sel("sless_queueproxy_concurrency_limit")+" > 0",
				"limit "+perFunction+" {{instance}}")),
		graph("Buffered requests", "short",
			query(sumBy("namespace, function", sel("sless_activator_buffered_requests")), perFunction)),
		graph("Rejected requests/s by reason", "reqps",
			query(sumBy("namespace, function, reason", rate(sel("sless_activator_rejected_requests_total"))),
				perFunction+" {{reason}}")),
	}}
}

func coldStarts() row {
	bucket := rate(sel("sless_cold_start_duration_seconds_bucket"))
	return row{"Cold starts", []cog.Builder[dashboard.Panel]{
		graph("Cold starts per minute", "short",
			query("60 * "+sel("namespace_function:sless_cold_starts:rate5m"), perFunction)),
		graph("Cold start duration p50 and p99", "s",
			query(quantile("0.5", "namespace, function, le", bucket), "p50 "+perFunction),
			query(quantile("0.99", "namespace, function, le", bucket), "p99 "+perFunction)),
		graph("Requests/s that waited for a cold start", "reqps",
			query(sumBy("namespace, function", rate(sel("sless_cold_start_requests_total"))), perFunction)),
	}}
}

func queuesAndCron() row {
	return row{"Queues and cron", []cog.Builder[dashboard.Panel]{
		graph("Queue depth", "short",
			query(`max by (queue) (`+sel("sless_queue_depth")+`)`, "{{queue}}")),
		graph("Messages/s by result", "cps",
			query(sumBy("function, queue, result", rate(sel("sless_queue_messages_total"))),
				"{{function}} {{queue}} {{result}}")),
		graph("Message duration p99", "s",
			query(quantile("0.99", "namespace, function, queue, le",
				rate(sel("sless_queue_message_duration_seconds_bucket"))), perFunction+" {{queue}}")),
		graph("Redeliveries/s", "cps",
			query(sumBy("namespace, function, queue", rate(sel("sless_queue_redelivered_messages_total"))),
				perFunction+" {{queue}}")),
		graph("Cron fires by result", "short",
			query(sumBy("trigger, result", increase(sel("sless_cron_fires_total"))),
				"{{trigger}} {{result}}")),
		graph("Cron lag p99", "s",
			query(quantile("0.99", "namespace, function, trigger, le",
				rate(sel("sless_cron_fire_lag_seconds_bucket"))), perFunction+" {{trigger}}")),
	}}
}

// asyncRuns shows the runs (asynchronous invocations). Every activator
// sharing a run store reports the same queued and running runs: their max
// is the store's, their sum would count each run once per activator.
func asyncRuns() row {
	return row{"Runs", []cog.Builder[dashboard.Panel]{
		graph("Runs queued and running", "short",
			query(`max by (namespace, function) (`+sel("sless_runs_queued")+`)`, perFunction+" queued"),
			query(`max by (namespace, function) (`+sel("sless_runs_running")+`)`, perFunction+" running")),
		graph("Oldest queued run", "s",
			query(`max by (namespace, function) (`+sel("sless_runs_oldest_queued_age_seconds")+`)`, perFunction)),
		graph("Runs submitted/s", "cps",
			query(sumBy("namespace, function", rate(sel("sless_runs_submitted_total"))), perFunction)),
		graph("Run attempts/s by outcome", "cps",
			query(sumBy("namespace, function, outcome", rate(sel("sless_run_attempts_total"))), perFunction+" {{outcome}}")),
		graph("Runs ended by state", "short",
			query(sumBy("namespace, function, state", increase(sel("sless_runs_completed_total"))), perFunction+" {{state}}")),
	}}
}

// platform shows the platform's own health; the invocation records and
// process series have no namespace and function labels.
func platform() row {
	return row{"Platform health", []cog.Builder[dashboard.Panel]{
		graph("Invocation records written and dropped", "cps",
			query("sum("+rate("sless_invocation_records_written_total")+")", "written"),
			query(sumBy("reason", rate("sless_invocation_records_dropped_total")),
				"dropped {{reason}}")),
		graph("Invocation records write duration p99", "s",
			query(quantile("0.99", "le",
				rate("sless_invocation_records_write_duration_seconds_bucket")), "p99")),
		graph("Instance crashes", "short",
			query(sumBy("namespace, function", increase(sel("sless_instance_crashes_total"))), perFunction)),
		graph("Prepare failures", "short",
			query(sumBy("namespace, function", increase(sel("sless_function_prepare_failures_total"))),
				perFunction)),
		graph("Autoscaler ticks/s", "cps",
			query("sum("+rate("sless_autoscaler_steps_total")+")", "ticks")),
		single("Functions scaled", "short",
			query("sum(sless_autoscaler_functions)", "functions")),
		graph("Platform CPU", "percentunit",
			query(rate("process_cpu_seconds_total"), "{{job}} {{instance}}")),
		graph("Platform memory", "bytes",
			query("process_resident_memory_bytes", "{{job}} {{instance}}")),
	}}
}
