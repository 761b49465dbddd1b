package runs

import (
	"slices"
	"testing"
	"time"

	"sless.dev/sless/internal/wire"
)

// A run's end links to the function or queue its policy names for that
// end, and to no function past the chain's bound.
func TestPolicyLink(t *testing.T) {
	p := Policy{MaxAge: time.Hour, OnSuccess: Target{Function: "next"}, OnFailure: Target{Function: "mend"}}
	toQueues := Policy{OnSuccess: Target{Queue: "done"}, OnFailure: Target{Queue: "failed"}}
	at := Attempt{Run: Run{ID: "PARENT", Namespace: "ns", Function: "fn", Depth: 2}, Number: 1}
	answer := Result{Status: 201, ContentType: "text/csv", Body: []byte("a,b\n")}
	for _, tc := range []struct {
		name   string
		policy Policy
		depth  int
		o      Outcome
		to     string
		header [][2]string
		err    string
		queue  string
	}{
		{"succeeded", p, 2, Outcome{State: Succeeded, Result: answer}, "next", [][2]string{{wire.RunParentHeader, "PARENT"},
			{wire.RunParentStateHeader, "succeeded"}, {wire.RunParentStatusHeader, "201"}, {"Content-Type", "text/csv"}}, "", ""},
		{"failed without an answer", p, 2, Outcome{State: Failed, Error: "timed out\r\nafter 5s"}, "mend", [][2]string{{wire.RunParentHeader, "PARENT"},
			{wire.RunParentStateHeader, "failed"}, {wire.RunParentErrorHeader, "timed out  after 5s"}}, "timed out\r\nafter 5s", ""},
		{"queued again", p, 2, Outcome{State: Queued, Error: "the function answered 503"}, "", nil, "the function answered 503", ""},
		{"no target", Policy{OnFailure: Target{Function: "mend"}}, 2, Outcome{State: Succeeded}, "", nil, "", ""},
		{"chain at its bound", p, MaxChainDepth, Outcome{State: Failed, Error: "the function answered 400"}, "", nil,
			"the function answered 400; its answer was not passed on to mend: the chain is 11 runs long, the most one makes", ""},
		{"succeeded to a queue", toQueues, 2, Outcome{State: Succeeded, Result: answer}, "", nil, "", "done"},
		{"failed to a queue at the chain's bound", toQueues, MaxChainDepth, Outcome{State: Failed, Error: "the function answered 400"}, "", nil,
			"the function answered 400", "failed"},
		{"queued again with queues", toQueues, 2, Outcome{State: Queued}, "", nil, "", ""},
	} {
		at.Run.Depth = tc.depth
		o := tc.o
		tc.policy.Link(at, &o)
		switch {
		case tc.to == "" && o.Next != nil:
			t.Errorf("%s: linked to %+v, want none", tc.name, o.Next)
		case tc.to != "" && (o.Next == nil || o.Next.Function != tc.to || o.Next.Namespace != "ns" || o.Next.Parent != "PARENT" ||
			o.Next.Depth != tc.depth+1 || o.Next.MaxAge != time.Hour || o.Next.Request.Method != "POST" || o.Next.Request.Path != "/" ||
			!slices.Equal(o.Next.Request.Header, tc.header) || string(o.Next.Request.Body) != string(o.Result.Body)):
			t.Errorf("%s: linked to %+v, want a POST to %s with %v", tc.name, o.Next, tc.to, tc.header)
		}
		if o.Publish != tc.queue {
			t.Errorf("%s: published to %q, want %q", tc.name, o.Publish, tc.queue)
		}
		if o.Error != tc.err {
			t.Errorf("%s: error %q, want %q", tc.name, o.Error, tc.err)
		}
	}
}
