package runs

import "strings"

// Publication is an ended run's answer waiting to be published to Queue
// (a policy's target queue): the store keeps it with the run until a
// publisher says the broker has it.
type Publication struct {
	Queue  string
	Run    Run
	Result Result
}

// The headers of a published answer's message, beside its body, its
// content type and its message id (the run's id), so that a consumer
// knows which run ended and how without asking.
const (
	MessageFunctionHeader = "x-sless-function" // namespace/name
	MessageRunHeader      = "x-sless-run-id"
	MessageStateHeader    = "x-sless-run-state"
	MessageStatusHeader   = "x-sless-run-status" // absent when the function never answered
	MessageErrorHeader    = "x-sless-run-error"  // absent when the run succeeded
	// MessageTruncatedHeader is true when the body is the start of an
	// answer too large to keep; MessageSizeHeader is then its size.
	MessageTruncatedHeader = "x-sless-result-truncated"
	MessageSizeHeader      = "x-sless-result-size"
)

// Headers are the headers of p's message, as an AMQP table holds them.
func (p *Publication) Headers() map[string]any {
	h := map[string]any{
		MessageFunctionHeader: p.Run.Namespace + "/" + p.Run.Function,
		MessageRunHeader:      string(p.Run.ID),
		MessageStateHeader:    string(p.Run.State),
	}
	if p.Result.Status > 0 {
		h[MessageStatusHeader] = int32(p.Result.Status)
	}
	if p.Run.Error != "" {
		h[MessageErrorHeader] = strings.ToValidUTF8(p.Run.Error, "\uFFFD")
	}
	if p.Result.Truncated {
		h[MessageTruncatedHeader] = true
		h[MessageSizeHeader] = p.Result.BodySize
	}
	return h
}
