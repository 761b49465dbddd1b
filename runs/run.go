// Package runs holds the asynchronous invocations of functions: a run is
// a request stored before its caller is told it was accepted, attempted at
// least once, and kept with its result until its retention ends. This
// package is the run's contract (its states, its fields, the store every
// component shares) and the in-memory store `sless dev` uses without a
// database; runs/postgres is the durable one.
package runs

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// State is where a run is in its life. A run starts Queued, is Running
// while an attempt holds it, and ends in one of the other four; it may go
// back from Running to Queued to be attempted again.
type State string

// The states of a run.
const (
	Queued    State = "queued"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
	Expired   State = "expired"
)

// Valid says whether s is one of the states of a run.
func (s State) Valid() bool { return s == Queued || s == Running || s.Ended() }

// Ended says whether a run in state s will change no more.
func (s State) Ended() bool {
	return s == Succeeded || s == Failed || s == Cancelled || s == Expired
}

// ID names a run. It is the capability to read it: 128 random bits and
// more, so that no one finds a run they were not given.
type ID string

// NewID returns a new random run ID (26 characters of base32, 130 bits).
func NewID() ID { return ID(rand.Text()) }

// ValidID says whether s could be an ID NewID made: anything else names no
// run, and is not looked up.
func ValidID(s string) bool {
	if len(s) != 26 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Request is what a caller asked a run to do: the function's request.
type Request struct {
	Method string `json:"method"`
	// Path is the request's path under the function's route, with its
	// query: "/" at least.
	Path   string      `json:"path"`
	Header [][2]string `json:"header,omitempty"`
	Body   []byte      `json:"-"`
}

// Digest identifies what a request asks, for Idempotency-Key: the same key
// for another request is a conflict.
func Digest(r *Request) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{r.Method, "\x00", r.Path, "\x00"} {
		h.Write([]byte(s))
	}
	h.Write(r.Body)
	return [sha256.Size]byte(h.Sum(nil))
}

// Submission is a run asked for.
type Submission struct {
	Namespace, Function string
	Request             Request
	// IdempotencyKey, when set, makes the submission once only within
	// the store's key window: the same key and request for the same
	// function answer the first run.
	IdempotencyKey string
	// MaxAge bounds how long the run may wait queued before it is
	// Expired.
	MaxAge time.Duration
	// Parent is the run whose end made this one (onSuccess, onFailure),
	// and Depth how many runs the chain went through to it (0 for a run
	// a caller submitted).
	Parent ID
	Depth  int
}

// Run is a run as its readers see it.
type Run struct {
	ID        ID     `json:"id"`
	Namespace string `json:"namespace"`
	Function  string `json:"function"`
	State     State  `json:"state"`
	// Attempts counts the attempts started, the one running included.
	Attempts    int        `json:"attempts"`
	CreatedAt   time.Time  `json:"createdAt"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// Status is the function's HTTP status in the last attempt that got
	// one (0 before).
	Status int `json:"status,omitempty"`
	// ResultSize is the size of that answer's body; ResultTruncated says
	// it was too large to keep whole (the result holds its start).
	ResultSize      int64 `json:"resultSize,omitempty"`
	ResultTruncated bool  `json:"resultTruncated,omitempty"`
	// Error says, in words a user can act on, why the last attempt
	// failed, or why the run ended as it did (invocation.MaxErrorBytes at
	// most).
	Error string `json:"error,omitempty"`
	// Parent is the run whose end made this one, Depth its place in the
	// chain (Submission's); Next is the run its end made.
	Parent ID  `json:"parent,omitempty"`
	Depth  int `json:"depth,omitempty"`
	Next   ID  `json:"next,omitempty"`
	// PublishTo is the queue the run's answer is published to
	// (Outcome.Publish), and PublishedAt when the broker confirmed it:
	// nil while it waits.
	PublishTo   string     `json:"publishTo,omitempty"`
	PublishedAt *time.Time `json:"publishedAt,omitempty"`
}

// Result is a function's answer to a run's last attempt.
type Result struct {
	Status      int
	ContentType string
	// Body is the answer's body, up to the store's bound; Truncated
	// says it was larger and BodySize is its whole size then.
	Body      []byte
	Truncated bool
	BodySize  int64
}

// Attempt is a run claimed for an attempt: the request to send and the
// attempt's number, which fences its outcome (Finish takes the outcome of
// the run's current attempt only).
type Attempt struct {
	Run     Run
	Request Request
	// Number is the attempt's number, from 1.
	Number int
}

// Outcome is how an attempt ended.
type Outcome struct {
	// State is the run's state after it: Succeeded or Failed to end it,
	// Queued to attempt it again at RetryAt.
	State   State
	RetryAt time.Time
	// Result is the function's answer, when it gave one (Status > 0).
	Result Result
	// Error is why the attempt failed, empty when it did not.
	Error string
	// Unsent says the attempt never reached the function (its activator
	// stopped first): it does not count as one, and the run is queued
	// again.
	Unsent bool
	// Next, with an outcome that ends the run, is the run its end makes
	// (Policy.Link), stored in the same write: a chain loses no link
	// to a process lost in between.
	Next *Submission
	// Publish, with an outcome that ends the run, names the queue its
	// answer is to be published to (Policy.Link): the store keeps it
	// with the run's end, for Store.Publish to hand to a publisher.
	Publish string
}

// Check says whether o is an outcome a store takes: one that ends the
// run, or queues it again.
func (o Outcome) Check() error {
	if o.State != Succeeded && o.State != Failed && o.State != Queued {
		return fmt.Errorf("runs: an attempt's outcome is succeeded, failed or queued, not %q", o.State)
	}
	return nil
}

// The errors of runs the platform ended.
const (
	CancelledError = "cancelled"
	ExpiredError   = "expired: queued longer than the function's async.maxAge"
	// LostError ends a run whose last attempt was lost (its activator
	// or sless dev ended) before its outcome was stored.
	LostError = "its last attempt was lost with the process that made it, before its outcome was stored"
)

// Errors of a store.
var (
	ErrNotFound = errors.New("no such run")
	// ErrKeyConflict: an Idempotency-Key already names another request.
	ErrKeyConflict = errors.New("the Idempotency-Key was used for another request to this function")
	// ErrNotEnded: a run's result was asked before it ended.
	ErrNotEnded = errors.New("the run has not ended")
	// ErrFull: the store holds as many runs as it may.
	ErrFull = errors.New("the run store is full")
	// ErrAttemptOver: the outcome of an attempt that no longer holds its
	// run (its lease ran out and another attempt took it, or the run was
	// cancelled) is not taken.
	ErrAttemptOver = errors.New("the attempt no longer holds the run")
)

// Store keeps runs. Every method is safe for concurrent use, by one
// process or (runs/postgres) by every process sharing the database.
type Store interface {
	// Submit stores a new run, or with an IdempotencyKey seen before
	// answers the run it made (created false).
	Submit(ctx context.Context, s Submission) (r Run, created bool, err error)
	Get(ctx context.Context, id ID) (Run, error)
	// Result is an ended run's answer; ErrNotEnded before.
	Result(ctx context.Context, id ID) (Run, Result, error)
	// Cancel ends a queued or running run as Cancelled; an ended run is
	// left as it is. The run is returned as it is after, cancelled true
	// when this call ended it.
	Cancel(ctx context.Context, id ID) (r Run, cancelled bool, err error)
	// Claim takes up to n runs of a function that are due (queued and
	// their retry time reached, or running with their lease run out),
	// the longest due first, each for an attempt leased until now+lease;
	// none when none is due. One call is one look at the store, however
	// many it takes. A lapsed run that has had maxAttempts attempts is not
	// attempted again: it ends failed, lost with the attempt that held it.
	Claim(ctx context.Context, namespace, function string, lease time.Duration, maxAttempts, n int) ([]Attempt, error)
	// Finish records an attempt's outcome; ErrAttemptOver when the
	// attempt no longer holds the run.
	Finish(ctx context.Context, a Attempt, o Outcome) (Run, error)
	// Over answers which of attempts no longer hold their run (it was
	// cancelled, or its lease ran out and another attempt took it): their
	// requests are to be cut short.
	Over(ctx context.Context, attempts []Attempt) ([]Attempt, error)
	// Expire ends as Expired the queued runs past their MaxAge, and
	// counts them by function.
	Expire(ctx context.Context) ([]Count, error)
	// Pending is the demand of every function with runs not ended.
	Pending(ctx context.Context) ([]Demand, error)
	// List is a function's runs, the newest first, as q selects them.
	List(ctx context.Context, namespace, function string, q Query) ([]Run, error)
	// Publish hands send up to limit of the answers waiting to be
	// published (Outcome.Publish), those of the runs ended first first,
	// each to one send at a time across processes, and marks published
	// the first n that send says the broker has: those are never handed
	// again. One handed to a process lost before its mark is handed
	// again: at least once. It answers n and send's error.
	Publish(ctx context.Context, limit int, send Sender) (n int, err error)
}

// Sender publishes answers in their order, and says how many of the first
// the broker has: all of them, or fewer with the error that stopped it.
type Sender func(ctx context.Context, ps []Publication) (int, error)

// Query selects the runs List answers.
type Query struct {
	// State, when set, keeps the runs in that state.
	State State
	// Before, when set, keeps the runs created before it, and with
	// BeforeID those created at Before whose ID is less: the CreatedAt
	// and ID of the last run of a page ask for the next (runs are in
	// that order, the newest first).
	Before   time.Time
	BeforeID ID
	// Limit bounds the runs answered (DefaultListLimit when 0, at most
	// MaxListLimit).
	Limit int
}

// The bounds of a List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Check refuses a query no store answers.
func (q Query) Check() error {
	switch {
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return fmt.Errorf("a limit is 1 to %d, not %d", MaxListLimit, q.Limit)
	case q.State != "" && !q.State.Valid():
		return fmt.Errorf("no run state %q: queued, running, succeeded, failed, cancelled or expired", q.State)
	}
	return nil
}

// LimitOrDefault is q.Limit, DefaultListLimit when 0.
func (q Query) LimitOrDefault() int { return cmp.Or(q.Limit, DefaultListLimit) }

// Count is a number of a function's runs.
type Count struct {
	Namespace, Function string
	Runs                int
}

// Demand is a function's runs not ended: what its instances have to do,
// for the dispatcher to claim and the autoscaler to scale for.
type Demand struct {
	Namespace, Function string
	Queued, Running     int
	// Due counts the runs to claim now: queued and due, or running with
	// their lease run out.
	Due int
	// OldestQueued is when the oldest queued run was submitted; zero
	// when none is queued.
	OldestQueued time.Time
}
