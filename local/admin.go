package local

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
)

// FunctionStatus is a function as the admin API and the table show it.
type FunctionStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Runtime   string `json:"runtime"`
	File      string `json:"file"`
	URL       string `json:"url"`
	// State is building, failed, idle (no instance), starting or ready.
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
	Desired   int    `json:"desired"`
	Ready     int    `json:"ready"`
	Starting  int    `json:"starting"`
	Crashes   int    `json:"crashes"`
	LastCrash string `json:"lastCrash,omitempty"`
	// LastStartupMs is how long the latest instance took from the start of
	// its process to ready.
	LastStartupMs float64 `json:"lastStartupMs"`
}

// Functions reports every function, sorted by namespace and name.
func (p *Platform) Functions() []FunctionStatus {
	p.mu.Lock()
	entries := make([]*entry, 0, len(p.fns))
	for _, e := range p.fns {
		entries = append(entries, e)
	}
	out := make([]FunctionStatus, 0, len(entries))
	for _, e := range entries {
		out = append(out, p.status(e))
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b FunctionStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// status is called with p.mu held.
func (p *Platform) status(e *entry) FunctionStatus {
	fn := e.fn
	st := FunctionStatus{Namespace: fn.Namespace, Name: fn.Name, Runtime: string(fn.Spec.Runtime),
		File: fn.File, URL: p.URL(fn.Namespace, fn.Name), Error: e.err}
	sup, ok := p.sup.Status(fn.Namespace, fn.Name)
	if ok {
		st.Desired, st.Ready, st.Starting = sup.Desired, sup.Ready, sup.Starting
		st.Crashes, st.LastCrash = sup.Crashes, sup.LastError
		st.LastStartupMs = float64(sup.LastStartup.Microseconds()) / 1000
	}
	switch {
	case e.err != "":
		st.State = "failed"
	case !e.running:
		st.State = "building"
	case st.Ready > 0:
		st.State = "ready"
	case st.Starting > 0:
		st.State = "starting"
	default:
		st.State = "idle"
	}
	return st
}

// adminHandler serves /v1/functions and /v1/functions/{namespace}/{name}.
func (p *Platform) adminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		if ns == "" {
			writeJSON(w, http.StatusOK, map[string]any{"functions": p.Functions()})
			return
		}
		p.mu.Lock()
		e := p.fns[ns+"/"+name]
		var st FunctionStatus
		if e != nil {
			st = p.status(e)
		}
		p.mu.Unlock()
		if e == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown function " + ns + "/" + name})
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
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
			state += ": " + strings.SplitN(st.Error, "\n", 2)[0]
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d/%d\t%s\n", st.Namespace, st.Name, st.Runtime, state, st.Ready, st.Desired, st.URL)
	}
	_ = tw.Flush()
	fmt.Fprintf(p.opts.Out, "admin API: http://%s/v1/functions\n", p.AdminAddr())
}
