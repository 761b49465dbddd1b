package local

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sless.dev/sless/local/manifests"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runclient"
)

// functionRuns submits the FunctionRuns of the manifests, each once,
// through the platform's own runs API, as the FunctionRun controller does
// on a cluster; there is no object to hold a status, so what becomes of
// each is said on the platform's output (and `sless runs` lists them). A
// FunctionRun's Idempotency-Key is its name: its run is the same across
// restarts on a database within the key window (24 h), and a manifest
// changed under the same name is refused, as an immutable object is.
type functionRuns struct {
	client *runclient.Client
	out    io.Writer

	mu   sync.Mutex
	runs map[types.NamespacedName]*submittedRun
}

// submittedRun is what was done with one FunctionRun of the manifests.
type submittedRun struct {
	digest     [sha256.Size]byte // of its spec, as last submitted
	id         runs.ID           // "" until it was accepted
	submitting bool              // a submission is under way
	said       string            // the last problem said, so that it is said once
}

// callTimeout bounds a submission.
const callTimeout = 10 * time.Second

// sync submits the FunctionRuns not yet accepted as they are now (a new
// one, or one whose Function was missing or whose store failed), each in
// the background, so that a store out of reach holds up no change of the
// manifests, and forgets those no manifest declares. ctx bounds the
// submissions and the runs followed.
func (f *functionRuns) sync(ctx context.Context, entries []manifests.RunEntry) {
	seen := map[types.NamespacedName]bool{}
	for _, e := range entries {
		seen[e.Key()] = true
		spec, _ := json.Marshal(e.Spec)
		digest := sha256.Sum256(spec)
		f.mu.Lock()
		s := f.runs[e.Key()]
		if s == nil || s.digest != digest {
			s = &submittedRun{digest: digest}
			f.runs[e.Key()] = s
		}
		start := s.id == "" && !s.submitting
		s.submitting = s.submitting || start
		f.mu.Unlock()
		if start {
			go func() {
				f.submit(ctx, e, s)
				f.mu.Lock()
				s.submitting = false
				f.mu.Unlock()
			}()
		}
	}
	f.mu.Lock()
	for k := range f.runs {
		if !seen[k] {
			delete(f.runs, k)
		}
	}
	f.mu.Unlock()
}

// submit submits one FunctionRun and, once accepted, follows its run to
// its end.
func (f *functionRuns) submit(ctx context.Context, e manifests.RunEntry, s *submittedRun) {
	req, err := runclient.RequestOf(&e.Spec)
	if err != nil {
		f.say(e, s, err.Error())
		return
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	a, err := f.client.Submit(cctx, e.Namespace, e.Spec.Function, "functionrun/"+e.Namespace+"/"+e.Name, req)
	if ctx.Err() != nil {
		return // sless dev stops: the next start submits it
	}
	switch runclient.Code(err) {
	case 0:
		if err != nil {
			f.say(e, s, "not submitted yet: "+err.Error())
			return
		}
	case http.StatusNotFound:
		f.say(e, s, fmt.Sprintf("no function %s/%s to run yet: it waits for one", e.Namespace, e.Spec.Function))
		return
	case http.StatusUnprocessableEntity:
		f.say(e, s, "its manifest changed since it was run: a FunctionRun is immutable, give it another name to run it again")
		return
	default:
		f.say(e, s, "not submitted yet: "+err.Error())
		return
	}
	f.mu.Lock()
	s.id, s.said = a.ID, ""
	f.mu.Unlock()
	fmt.Fprintf(f.out, "functionrun %s: run %s %s (`sless run %s`)\n", e.Key(), a.ID, a.State, a.ID)
	if a.State.Ended() {
		return
	}
	go func() {
		r, err := f.client.Follow(ctx, a.ID)
		if err == nil {
			fmt.Fprintf(f.out, "functionrun %s: run %s %s after %d attempt(s)%s\n", e.Key(), r.ID, r.State, r.Attempts, errorSuffix(r.Error))
		}
	}()
}

// say says a FunctionRun's problem, once until it changes.
func (f *functionRuns) say(e manifests.RunEntry, s *submittedRun, problem string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.said == problem {
		return
	}
	s.said = problem
	fmt.Fprintf(f.out, "functionrun %s (%s): %s\n", e.Key(), e.File, problem)
}

func errorSuffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}
