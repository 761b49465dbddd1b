package consumer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
)

// IsolateHeader marks a message to be run alone: every other message of
// the instance waits while it runs. Its value is markCrashed for a
// message that crashed the function on its own, or the id of the crash it
// was in flight at, while the culprit of that crash is not known.
const IsolateHeader = "x-sless-isolate"

// markCrashed marks a message that crashed the function while it ran
// alone: its retries run alone too, so that they take no other message
// down with them.
const markCrashed = "crashed"

// maxResolved bounds the crashes an instance remembers the culprit of.
const maxResolved = 64

// Isolation tells the message that crashed the user process from the
// messages in flight with it, for the consumers of one instance, which
// share its process. A crash while a message was the only one at the
// process is that message's, and spends one of its attempts. A crash
// while several were there spends none: each goes back to its queue
// marked with the crash (IsolateHeader), and runs alone when it returns.
// The one that crashes the process alone is the culprit; once it is
// known, the others marked with the same crash run with the rest again.
// Unmarked messages share the process, so that a queue without crashes
// keeps its concurrency, and AWS Lambda's bisection of a failed batch
// becomes, for messages invoked one by one, running each suspect alone.
type Isolation struct {
	// gate is held shared by unmarked invocations, and exclusively by
	// marked ones.
	gate sync.RWMutex

	mu      sync.Mutex
	running int    // invocations at the process now
	started uint64 // invocations started so far
	life    uint64 // crashes seen so far: the process's incarnation
	name    string // this instance's crashes are name-<life>
	// resolved are the crashes whose culprit ran alone here, the newest
	// last.
	resolved []string
}

// NewIsolation returns the isolation of one instance's consumers.
func NewIsolation() *Isolation {
	return &Isolation{name: fmt.Sprintf("%016x", rand.Uint64())}
}

// turn is one invocation's time at the process.
type turn struct {
	first   bool   // no other invocation was running when it started
	started uint64 // Isolation.started once it had started
	life    uint64
}

// run calls invoke with the process: shared, or alone when exclusive,
// once ready reports true; when ready reports false (the caller gives
// up), invoke is not called and ok is false. The wait for ready is inside
// the gate: a turn that crashed the process ends before its death shows
// everywhere, and the turns let in after it must wait for the new
// process, not reach the dying one. alone reports whether the turn had
// the process to itself throughout: none was running when it started,
// and none started since.
func (s *Isolation) run(exclusive bool, ready func() bool, invoke func()) (t turn, alone, ok bool) {
	if exclusive {
		s.gate.Lock()
		defer s.gate.Unlock()
	} else {
		s.gate.RLock()
		defer s.gate.RUnlock()
	}
	if !ready() {
		return turn{}, false, false
	}
	t = s.begin()
	invoke()
	return t, s.end(t), true
}

// begin counts a turn in.
func (s *Isolation) begin() turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running++
	s.started++
	return turn{first: s.running == 1, started: s.started, life: s.life}
}

// end counts turn t out, and reports whether it was alone.
func (s *Isolation) end(t turn) (alone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	return t.first && s.started == t.started
}

// crash names the crash that ended turn t: the same for every turn that
// started in the same life of the process.
func (s *Isolation) crash(t turn) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life == t.life {
		s.life++
	}
	return fmt.Sprintf("%s-%d", s.name, t.life)
}

// alone reports whether a message of mark must run alone: a known
// culprit does, and a suspect does until its crash's culprit is known.
func (s *Isolation) alone(mark string) bool {
	if mark == "" {
		return false
	}
	if mark == markCrashed {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !slices.Contains(s.resolved, mark)
}

// resolve records that the culprit of crash id is known.
func (s *Isolation) resolve(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.resolved, id) {
		return
	}
	if len(s.resolved) == maxResolved {
		s.resolved = slices.Delete(s.resolved, 0, 1)
	}
	s.resolved = append(s.resolved, id)
}
