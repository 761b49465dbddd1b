package runs

import (
	"testing"
	"time"
)

func TestPolicyOutcome(t *testing.T) {
	p := Policy{MaxAttempts: 3, MinBackoff: time.Second, MaxBackoff: 10 * time.Second}
	now := time.Now()
	for _, tc := range []struct {
		name        string
		attempt     int
		answer      Answer
		state       State
		err         string
		waitAtLeast time.Duration
		waitAtMost  time.Duration
	}{
		{"ok", 1, Answer{Status: 200}, Succeeded, "", 0, 0},
		{"redirect", 1, Answer{Status: 302}, Succeeded, "", 0, 0},
		{"not found", 1, Answer{Status: 404}, Failed, "the function answered 404", 0, 0},
		{"bad request", 1, Answer{Status: 400}, Failed, "the function answered 400", 0, 0},
		{"server error", 1, Answer{Status: 500}, Queued, "the function answered 500", 800 * time.Millisecond, time.Second},
		{"second backoff doubles", 2, Answer{Status: 502, Failure: "the instance closed the connection"}, Queued,
			"the instance closed the connection", 1600 * time.Millisecond, 2 * time.Second},
		{"timeout", 1, Answer{Status: 408}, Queued, "the function answered 408", 800 * time.Millisecond, time.Second},
		{"too many, Retry-After longer", 1, Answer{Status: 429, RetryAfter: 5 * time.Second}, Queued, "the function answered 429",
			5 * time.Second, 5 * time.Second},
		{"Retry-After past the bound", 1, Answer{Status: 503, RetryAfter: time.Hour}, Queued, "the function answered 503",
			10 * time.Second, 10 * time.Second},
		{"attempts spent", 3, Answer{Status: 504, Failure: "timed out"}, Failed, "timed out (attempt 3 of 3)", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := p.Outcome(tc.attempt, tc.answer, now)
			if o.State != tc.state || o.Error != tc.err {
				t.Errorf("%s %q, want %s %q", o.State, o.Error, tc.state, tc.err)
			}
			if tc.state != Queued {
				return
			}
			if wait := o.RetryAt.Sub(now); wait < tc.waitAtLeast || wait > tc.waitAtMost {
				t.Errorf("retry after %s, want between %s and %s", wait, tc.waitAtLeast, tc.waitAtMost)
			}
		})
	}
}

func TestBackoffBounded(t *testing.T) {
	p := Policy{MinBackoff: time.Second, MaxBackoff: time.Minute}
	for n := 1; n < 100; n++ {
		if d := p.Backoff(n); d <= 0 || d > time.Minute {
			t.Fatalf("backoff %d: %s", n, d)
		}
	}
	if d := (Policy{}).Backoff(3); d != 0 {
		t.Errorf("no backoff set: %s", d)
	}
}

func TestValidID(t *testing.T) {
	for range 100 {
		if id := NewID(); !ValidID(string(id)) {
			t.Fatalf("NewID %q is not valid", id)
		}
	}
	for _, s := range []string{"", "x", "N3ZK7M4QF6XRWOD2B5HLA4PJ7", "N3ZK7M4QF6XRWOD2B5HLA4PJ7E1", "n3zk7m4qf6xrwod2b5hla4pj7e",
		"N3ZK7M4QF6XRWOD2B5HLA4PJ0E", "N3ZK7M4QF6XRWOD2B5HLA4PJ\xffE"} {
		if ValidID(s) {
			t.Errorf("ValidID(%q) = true", s)
		}
	}
}
