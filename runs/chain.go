package runs

import (
	"fmt"
	"strconv"
	"strings"

	"sless.dev/sless/internal/wire"
)

// MaxChainDepth bounds a chain: a run made by onSuccess or onFailure is at
// most this many links from the run a caller submitted, so that functions
// passing their answers round in a circle stop.
const MaxChainDepth = 10

// Link says where the answer of a run that an attempt's outcome o ends
// goes, as OnSuccess or OnFailure say, for the store to keep in the same
// write that ends the run: a chain loses no link to a process lost in
// between. To a queue, o.Publish names it. To a function, o.Next is its
// run: a POST of the answer's body (as kept) with its Content-Type and the
// Sless-Run-Parent fields saying which run ended and how, queued up to
// p.MaxAge (the target's own is better, when known); when the chain is as
// deep as it may be, o.Error says the link was not made instead.
func (p Policy) Link(at Attempt, o *Outcome) {
	var target Target
	switch o.State {
	case Succeeded:
		target = p.OnSuccess
	case Failed:
		target = p.OnFailure
	}
	switch {
	case target.Queue != "":
		o.Publish = target.Queue
	case target.Function == "":
	case at.Run.Depth >= MaxChainDepth:
		o.Error = joinError(o.Error, fmt.Sprintf("its answer was not passed on to %s: the chain is %d runs long, the most one makes", target.Function, MaxChainDepth+1))
	default:
		o.Next = &Submission{Namespace: at.Run.Namespace, Function: target.Function, Parent: at.Run.ID, Depth: at.Run.Depth + 1, MaxAge: p.MaxAge,
			Request: Request{Method: "POST", Path: "/", Header: parentFields(at.Run.ID, o), Body: o.Result.Body}}
	}
}

// parentFields are the header fields of the run an ended run's end makes:
// which run ended and how, and its answer's Content-Type.
func parentFields(parent ID, o *Outcome) [][2]string {
	h := [][2]string{{wire.RunParentHeader, string(parent)}, {wire.RunParentStateHeader, string(o.State)}}
	if o.Result.Status > 0 {
		h = append(h, [2]string{wire.RunParentStatusHeader, strconv.Itoa(o.Result.Status)})
		if o.Result.ContentType != "" {
			h = append(h, [2]string{"Content-Type", o.Result.ContentType})
		}
	}
	if o.Error != "" {
		h = append(h, [2]string{wire.RunParentErrorHeader, fieldText(o.Error)})
	}
	return h
}

// fieldText is s fit for a header field's value: its control characters
// as spaces.
func fieldText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// joinError is why a run ended, with more said after it.
func joinError(why, more string) string {
	if why == "" {
		return more
	}
	return why + "; " + more
}
