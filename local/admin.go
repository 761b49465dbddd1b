package local

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/local/manifests"
	"sless.dev/sless/local/supervisor"
	"sless.dev/sless/queueproxy/consumer"
	"sless.dev/sless/timeline"
)

// FunctionStatus is a function as the admin API and the table show it.
type FunctionStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Runtime   string `json:"runtime"`
	File      string `json:"file"`
	URL       string `json:"url"`
	// Created is when its manifest was first loaded.
	Created time.Time `json:"created"`
	// State is building, failed (its build: nothing to run), crashing
	// (its instances crash before ready), idle (no instance), starting or
	// ready; Error says why it is failed or crashing.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Update is "failed" when a new version could not be built or crashes
	// before ready while the previous one serves; UpdateError says why.
	Update      string `json:"update,omitempty"`
	UpdateError string `json:"updateError,omitempty"`
	// BuildError is the last build or install failure of its source.
	BuildError string `json:"buildError,omitempty"`
	Desired    int    `json:"desired"`
	Ready      int    `json:"ready"`
	Starting   int    `json:"starting"`
	Crashes    int    `json:"crashes"`
	LastCrash  string `json:"lastCrash,omitempty"`
	// LastStartupMs is how long the latest instance took from the start of
	// its process to ready.
	LastStartupMs float64               `json:"lastStartupMs"`
	Instances     []supervisor.Instance `json:"instances"`
	// Triggers are its triggers and what each is doing.
	Triggers []TriggerStatus `json:"triggers"`
	// Stats are its invocations over the last five minutes.
	Stats timeline.Stats `json:"stats"`
	// Overrides are the changes made to it through this API, which hold
	// until sless dev stops; Spec has them applied.
	Overrides *Overrides            `json:"overrides,omitempty"`
	Spec      v1alpha1.FunctionSpec `json:"spec"`
}

// statsWindow is the window of FunctionStatus.Stats.
const statsWindow = 5 * time.Minute

// TriggerStatus is one trigger of a function.
type TriggerStatus struct {
	Name string `json:"name"`
	// Kind is http, cron or rabbitmq.
	Kind  string `json:"kind"`
	Queue string `json:"queue,omitempty"`
	// State is disabled for a trigger with enabled: false, else active
	// for HTTP and cron. A RabbitMQ trigger is consuming (a ready
	// instance consumes it), waiting (no instance: its first message
	// wakes the function), disabled (also when the platform has no
	// broker) or failing, Error saying why: a bad URL, refused
	// credentials, a missing queue.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// triggers reports fn's triggers from what its instances' consumers and
// the autoscaler's reads of its queues say.
func (p *Platform) triggers(fn manifests.Function, instances []supervisor.Instance) []TriggerStatus {
	out := make([]TriggerStatus, 0, len(fn.Spec.Triggers))
	var queueErrs map[string]string
	for _, t := range fn.Spec.Triggers {
		ts := TriggerStatus{Name: t.Name, Kind: "http", State: "active"}
		switch {
		case t.Cron != nil:
			ts.Kind = "cron"
		case t.RabbitMQ != nil:
			ts.Kind, ts.Queue, ts.State = "rabbitmq", t.RabbitMQ.Queue, "waiting"
			if p.opts.AMQPURL == "" || !t.IsEnabled() {
				ts.State = "disabled"
				break
			}
			if queueErrs == nil {
				queueErrs = p.scaler.QueueErrors(fn.Namespace, fn.Name)
			}
			consumerState(&ts, instances, queueErrs[ts.Queue])
		}
		if !t.IsEnabled() {
			ts.State = "disabled"
		}
		out = append(out, ts)
	}
	return out
}

// consumerState sets a RabbitMQ trigger's state: failing when a consumer
// of it, or with none the last depth read, fails; else consuming when a
// ready instance consumes it.
func consumerState(ts *TriggerStatus, instances []supervisor.Instance, readErr string) {
	consumers := 0
	for _, in := range instances {
		for _, c := range in.Consumers {
			if c.Trigger != ts.Name {
				continue
			}
			consumers++
			if c.State == consumer.StateFailing && ts.Error == "" {
				ts.State, ts.Error = "failing", c.Error
			}
		}
	}
	switch {
	case ts.Error != "":
	case consumers > 0:
		ts.State = "consuming"
	case readErr != "":
		ts.State, ts.Error = "failing", readErr
	}
}

// Functions reports every function, sorted by namespace and name.
func (p *Platform) Functions() []FunctionStatus {
	p.mu.Lock()
	entries := make([]*entry, 0, len(p.fns))
	for _, e := range p.fns {
		entries = append(entries, e)
	}
	out := make([]FunctionStatus, 0, len(entries))
	now := time.Now()
	for _, e := range entries {
		out = append(out, p.status(e, now))
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b FunctionStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// status is called with p.mu held.
func (p *Platform) status(e *entry, now time.Time) FunctionStatus {
	fn := e.effective()
	st := FunctionStatus{Namespace: fn.Namespace, Name: fn.Name, Runtime: string(fn.Spec.Runtime),
		File: fn.File, URL: p.URL(fn.Namespace, fn.Name), Created: e.created, BuildError: e.err,
		Spec: fn.Spec, Instances: []supervisor.Instance{}}
	sup, _ := p.sup.Status(fn.Namespace, fn.Name)
	st.Desired, st.Ready, st.Starting = sup.Desired, sup.Ready, sup.Starting
	st.Crashes, st.LastCrash = sup.Crashes, sup.LastError
	st.LastStartupMs = float64(sup.LastStartup.Microseconds()) / 1000
	if sup.Instances != nil {
		st.Instances = sup.Instances
	}
	st.Triggers = p.triggers(fn, st.Instances)
	st.Stats, _ = p.timeline.Stats(now, fn.Namespace, fn.Name, statsWindow)
	if !e.over.empty() {
		o := e.over
		st.Overrides = &o
	}
	switch {
	case !e.running && e.err != "":
		st.State, st.Error = "failed", e.err
	case !e.running:
		st.State = "building"
	case sup.Failing != "" && st.Ready == 0:
		st.State, st.Error = "crashing", sup.Failing
	case st.Ready > 0:
		st.State = "ready"
	case st.Starting > 0:
		st.State = "starting"
	default:
		st.State = "idle"
	}
	switch {
	case e.running && e.err != "":
		st.Update, st.UpdateError = "failed", e.err
	case sup.Failing != "" && st.Ready > 0:
		st.Update, st.UpdateError = "failed", sup.Failing
	}
	return st
}

// apiHandler serves the platform's /v1/ routes. Each route of one
// function lives under /v1/namespaces/{namespace}/functions/{name}.
func (p *Platform) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/functions", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"functions": p.Functions()})
	})
	mux.HandleFunc("GET "+functionRoute, func(w http.ResponseWriter, r *http.Request) {
		st, ok := p.Function(r.PathValue("namespace"), r.PathValue("name"))
		if !ok {
			writeUnknown(w, r)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET "+functionRoute+"/logs", p.serveLogs)
	mux.HandleFunc("GET "+functionRoute+"/timeline", p.serveTimeline)
	mux.HandleFunc("GET "+functionRoute+"/source", p.source)
	mux.HandleFunc("GET "+functionRoute+"/manifest", p.manifest)
	mux.HandleFunc("PATCH "+functionRoute+"/triggers/{trigger}", p.setTrigger)
	mux.HandleFunc("PATCH "+functionRoute+"/scale", p.setScale)
	mux.HandleFunc("POST "+functionRoute+"/invoke", p.invoke)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such route: " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// functionRoute is the admin API's path of one function.
const functionRoute = "/v1/namespaces/{namespace}/functions/{name}"

// Function reports one function; ok is false when no manifest declares it.
func (p *Platform) Function(namespace, name string) (st FunctionStatus, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.fns[namespace+"/"+name]
	if e == nil {
		return FunctionStatus{}, false
	}
	return p.status(e, time.Now()), true
}

func writeUnknown(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown function " + r.PathValue("namespace") + "/" + r.PathValue("name")})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// printTable shows the functions, their state and URL.
func (p *Platform) printTable() {
	tw := tabwriter.NewWriter(p.opts.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tRUNTIME\tSTATE\tINSTANCES\tURL")
	for _, st := range p.Functions() {
		state := st.State
		if st.Error != "" {
			state += ": " + firstLine(st.Error)
		}
		if st.Update != "" {
			state += ", update " + st.Update + ": " + firstLine(st.UpdateError)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d/%d\t%s\n", st.Namespace, st.Name, st.Runtime, state, st.Ready, st.Desired, st.URL)
	}
	_ = tw.Flush()
	fmt.Fprintf(p.opts.Out, "admin API: http://%s/v1/functions\n", p.AdminAddr())
}
