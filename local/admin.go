package local

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/local/supervisor"
	"sless.dev/sless/queueproxy/consumer"
	"sless.dev/sless/timeline"
)

// FunctionStatus is a function as the admin API and the table show it:
// what every backend shows, and what only the local platform knows.
type FunctionStatus struct {
	adminapi.Status
	File string `json:"file"`
	// Created is when its manifest was first loaded.
	Created time.Time `json:"created"`
	// Update is "failed" when a new version could not be applied: its
	// manifest no longer loads (it does not parse, is invalid, or another
	// manifest declares the same name), or it could not be built or
	// crashes before ready, while the previous one serves. UpdateError
	// says why, one cause a line.
	Update      string `json:"update,omitempty"`
	UpdateError string `json:"updateError,omitempty"`
	// BuildError is the last build or install failure of its source.
	BuildError string `json:"buildError,omitempty"`
	Crashes    int    `json:"crashes"`
	LastCrash  string `json:"lastCrash,omitempty"`
	// LastStartupMs is how long the latest instance took from the start of
	// its process to ready.
	LastStartupMs float64               `json:"lastStartupMs"`
	Instances     []supervisor.Instance `json:"instances"`
}

// triggers reports fn's triggers from what its instances' consumers and
// the autoscaler's reads of its queues say.
func (p *Platform) triggers(fn manifests.Entry, instances []supervisor.Instance) []adminapi.TriggerStatus {
	out := make([]adminapi.TriggerStatus, 0, len(fn.Spec.Triggers))
	var queueErrs map[string]string
	for _, t := range fn.Spec.Triggers {
		ts := adminapi.NewTriggerStatus(t)
		switch {
		case ts.State != adminapi.TriggerWaiting:
		case p.opts.AMQPURL == "":
			ts.State = adminapi.TriggerDisabled // no broker to consume
		default:
			if queueErrs == nil {
				queueErrs = p.scaler.QueueErrors(fn.Namespace, fn.Name)
			}
			consumerState(&ts, instances, queueErrs[ts.Queue])
		}
		out = append(out, ts)
	}
	return out
}

// consumerState sets a RabbitMQ trigger's state: failing when a consumer
// of it, or with none the last depth read, fails; else consuming when a
// ready instance consumes it.
func consumerState(ts *adminapi.TriggerStatus, instances []supervisor.Instance, readErr string) {
	consumers := 0
	for _, in := range instances {
		for _, c := range in.Consumers {
			if c.Trigger != ts.Name {
				continue
			}
			consumers++
			if c.State == consumer.StateFailing && ts.Error == "" {
				ts.State, ts.Error = adminapi.TriggerFailing, c.Error
			}
		}
	}
	switch {
	case ts.Error != "":
	case consumers > 0:
		ts.State = adminapi.TriggerConsuming
	case readErr != "":
		ts.State, ts.Error = adminapi.TriggerFailing, readErr
	}
}

// Functions reports every function, sorted by namespace and name.
func (p *Platform) Functions() []FunctionStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	entries := make([]*entry, 0, len(p.fns))
	for _, e := range p.fns {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.fn.Namespace, b.fn.Namespace), cmp.Compare(a.fn.Name, b.fn.Name))
	})
	out := make([]FunctionStatus, 0, len(entries))
	now := time.Now()
	for _, e := range entries {
		out = append(out, p.status(e, now))
	}
	return out
}

// status is called with p.mu held.
func (p *Platform) status(e *entry, now time.Time) FunctionStatus {
	fn := e.effective()
	st := FunctionStatus{Status: adminapi.Status{Namespace: fn.Namespace, Name: fn.Name, Runtime: string(fn.Spec.Runtime),
		URL: p.URL(fn.Namespace, fn.Name), Spec: fn.Spec},
		File: fn.File, Created: e.created, BuildError: e.err, Instances: []supervisor.Instance{}}
	sup, _ := p.sup.Status(fn.Namespace, fn.Name)
	st.Desired, st.Ready, st.Starting = sup.Desired, sup.Ready, sup.Starting
	st.Crashes, st.LastCrash = sup.Crashes, sup.LastError
	st.LastStartupMs = float64(sup.LastStartup.Microseconds()) / 1000
	if sup.Instances != nil {
		st.Instances = sup.Instances
	}
	st.Triggers = p.triggers(fn, st.Instances)
	st.Stats, _ = p.timeline.Stats(now, fn.Namespace, fn.Name, adminapi.StatsWindow)
	st.Buffered = p.act.Waiting(fn.Namespace, fn.Name)
	st.Panic = p.scaler.Panicking(fn.Namespace, fn.Name)
	st.QueueDepth = p.scaler.QueueDepth(fn.Namespace, fn.Name)
	if !e.over.IsZero() {
		o := e.over
		st.Overrides = &o
	}
	switch {
	case !e.running && e.err != "":
		st.State, st.Error = adminapi.StateFailed, e.err
	case !e.running:
		st.State = adminapi.StateBuilding
	case sup.Failing != "" && st.Ready == 0:
		st.State, st.Reason, st.Error = adminapi.StateCrashing, sup.FailingReason, sup.Failing
	case st.Ready > 0:
		st.State = adminapi.StateReady
	case st.Starting > 0:
		st.State = adminapi.StateStarting
	default:
		st.State = adminapi.StateIdle
	}
	var causes []string
	for _, me := range p.loadErrs {
		if me.Function == fn.Key().String() || me.Function == "" && me.File == fn.File {
			causes = append(causes, "manifest "+me.File+": "+me.Error)
		}
	}
	switch {
	case e.running && e.err != "":
		causes = append(causes, e.err)
	case sup.Failing != "" && st.Ready > 0:
		causes = append(causes, sup.Failing)
	}
	if len(causes) > 0 {
		st.Update, st.UpdateError = "failed", strings.Join(causes, "\n")
	}
	return st
}

// ManifestErrors are the errors of the last load of the manifests.
func (b backend) ManifestErrors(context.Context) []adminapi.ManifestError {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return slices.Clone(b.p.loadErrs)
}

// apiHandler serves the platform's /v1/ routes: the admin API's, and the
// output and source only the local platform has.
func (p *Platform) apiHandler() http.Handler {
	mux := adminapi.NewMux(backend{p}, func(context.Context) *timeline.Timeline { return p.timeline }, p.opts.Runs)
	mux.HandleFunc("GET "+adminapi.FunctionRoute+"/logs", p.serveLogs)
	mux.HandleFunc("GET "+adminapi.FunctionRoute+"/source", p.source)
	return mux
}

// Function reports one function; ok is false when no manifest declares it.
func (p *Platform) Function(namespace, name string) (st FunctionStatus, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.fns[types.NamespacedName{Namespace: namespace, Name: name}]
	if e == nil {
		return FunctionStatus{}, false
	}
	return p.status(e, time.Now()), true
}

func writeUnknown(w http.ResponseWriter, r *http.Request) {
	adminapi.WriteError(w, adminapi.Unknown(r.PathValue("namespace"), r.PathValue("name")))
}

// printTable shows the functions, their state and URL, in one write:
// the log lines other goroutines write meanwhile come before or after it,
// not between its cells (tabwriter writes a cell at a time).
func (p *Platform) printTable() {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tRUNTIME\tSTATE\tINSTANCES\tURL")
	for _, st := range p.Functions() {
		state := string(st.State)
		if st.Error != "" {
			state += ": " + firstLine(st.Error)
		}
		if st.Update != "" {
			state += ", update " + st.Update + ": " + firstLine(st.UpdateError)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d/%d\t%s\n", st.Namespace, st.Name, st.RuntimeShown(), state, st.Ready, st.Desired, st.URL)
	}
	_ = tw.Flush()
	fmt.Fprintf(&table, "console: http://%s/   admin API: http://%[1]s/v1/functions\n", p.AdminAddr())
	_, _ = p.opts.Out.Write(table.Bytes())
}
