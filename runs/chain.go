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

// Link makes the run that an attempt's outcome o makes as it ends the
// run: o.Next, to the function OnSuccess or OnFailure names, a POST of the
// answer's body (as kept) with its Content-Type and the Sless-Run-Parent
// fields saying which run ended and how, queued up to p.MaxAge (the
// target's own is better, when known). It makes none when o does not end
// the run or p names no function for its end; when the chain is as deep
// as it may be, o.Error says the link was not made.
func (p Policy) Link(at Attempt, o *Outcome) {
	target := ""
	switch o.State {
	case Succeeded:
		target = p.OnSuccess
	case Failed:
		target = p.OnFailure
	}
	if target == "" {
		return
	}
	if at.Run.Depth >= MaxChainDepth {
		o.Error = joinError(o.Error, fmt.Sprintf("its answer was not passed on to %s: the chain is %d runs long, the most one makes", target, MaxChainDepth+1))
		return
	}
	h := [][2]string{{wire.RunParentHeader, string(at.Run.ID)}, {wire.RunParentStateHeader, string(o.State)}}
	if o.Result.Status > 0 {
		h = append(h, [2]string{wire.RunParentStatusHeader, strconv.Itoa(o.Result.Status)})
		if o.Result.ContentType != "" {
			h = append(h, [2]string{"Content-Type", o.Result.ContentType})
		}
	}
	if o.Error != "" {
		h = append(h, [2]string{wire.RunParentErrorHeader, fieldText(o.Error)})
	}
	o.Next = &Submission{Namespace: at.Run.Namespace, Function: target, Parent: at.Run.ID, Depth: at.Run.Depth + 1, MaxAge: p.MaxAge,
		Request: Request{Method: "POST", Path: "/", Header: h, Body: o.Result.Body}}
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
