package forward

import (
	"errors"
	"net"
	"net/http"
	"os"
	"syscall"

	"github.com/valyala/fasthttp"

	"sless.dev/sless/internal/wire"
)

// StatusClientClosedRequest is recorded for requests whose client hung up
// before the answer (nginx's 499); nobody receives it.
const StatusClientClosedRequest = 499

// Errors of a call, beyond the network's own. Those of the client's body
// are the client's fault and map to 4xx; the others are the next hop's.
var (
	// ErrClientGone means the client hung up and the call was aborted.
	ErrClientGone = errors.New("client closed the connection")
	// ErrBodyTooLarge means a request body passed the limit while it was
	// being read.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrBodyTimeout means the client stopped sending its body.
	ErrBodyTimeout = errors.New("request body not received in time")
	// ErrBadBody means the client's body could not be read: short or
	// badly chunked.
	ErrBadBody = errors.New("malformed request body")
	// ErrNothingRead means the connection closed before any byte of a
	// response: on a reused connection, the function had closed it idle.
	ErrNothingRead = errors.New("function closed the connection before responding")
	// ErrUnsent means nothing of the request reached the function and the
	// request is intact: it can be sent again, to another instance. A
	// failed dial is one; a queue-proxy whose user process refused the
	// connection answers with the unsent mark, which is another.
	ErrUnsent = errors.New("request not delivered")
	// ErrIdleTimeout and ErrMaxDuration cut a streamed answer: the
	// function sent nothing for the idle timeout, or the request's
	// maximum duration passed.
	ErrIdleTimeout = errors.New("idle timeout: the function sent nothing for too long")
	ErrMaxDuration = errors.New("the request's maximum duration passed")
	// ErrRefused means the next hop's function refused the connection.
	// Alone, the request's body was sent and it cannot be sent again;
	// inside an ErrUnsent, it can.
	ErrRefused = errors.New("connection refused by the function")
)

// Failure is how a hop answers a request whose call to the next hop
// failed: the one mapping from errors to statuses that the activator and
// the queue-proxy share, so that they cannot drift.
type Failure struct {
	// Code is the status the client gets (499: nobody gets it).
	Code int
	// Cause says why, for the answer's body.
	Cause string
	// Unsent means the request reached no function and can be sent
	// again, within its deadline: the instance refused it.
	Unsent bool
}

// ClientFault reports whether the client caused the failure; such a
// failure never counts against the function.
func (f Failure) ClientFault() bool { return f.Code >= 400 && f.Code < 500 }

// Message is the error an answer's body gives: the cause, said to be the
// function's when it is.
func (f Failure) Message() string {
	if f.ClientFault() || f.Code == fasthttp.StatusServiceUnavailable {
		return f.Cause
	}
	return "function failed: " + f.Cause
}

// Classify maps the error of a call (Client.Do) to its Failure.
func Classify(err error) Failure {
	switch {
	case errors.Is(err, ErrClientGone):
		return Failure{Code: StatusClientClosedRequest, Cause: ErrClientGone.Error()}
	case errors.Is(err, ErrBodyTooLarge):
		return Failure{Code: fasthttp.StatusRequestEntityTooLarge, Cause: ErrBodyTooLarge.Error()}
	case errors.Is(err, ErrBodyTimeout):
		return Failure{Code: fasthttp.StatusRequestTimeout, Cause: ErrBodyTimeout.Error()}
	case errors.Is(err, ErrBadBody):
		return Failure{Code: fasthttp.StatusBadRequest, Cause: ErrBadBody.Error()}
	case outOfResources(err):
		// This process ran out of sockets: no instance is to blame.
		return Failure{Code: fasthttp.StatusServiceUnavailable, Cause: "out of connections: " + err.Error()}
	case errors.Is(err, ErrUnsent):
		return Failure{Code: fasthttp.StatusBadGateway, Cause: refusedCause(err), Unsent: true}
	case errors.Is(err, ErrIdleTimeout), errors.Is(err, ErrMaxDuration):
		return Failure{Code: fasthttp.StatusGatewayTimeout, Cause: err.Error()}
	case isTimeout(err):
		return Failure{Code: fasthttp.StatusGatewayTimeout, Cause: "timeout"}
	case errors.Is(err, ErrRefused):
		return Failure{Code: fasthttp.StatusBadGateway, Cause: ErrRefused.Error()}
	case errors.Is(err, ErrNothingRead):
		return Failure{Code: fasthttp.StatusBadGateway, Cause: ErrNothingRead.Error()}
	case errors.Is(err, syscall.ECONNRESET):
		return Failure{Code: fasthttp.StatusBadGateway, Cause: "connection reset by the function"}
	}
	return Failure{Code: fasthttp.StatusBadGateway, Cause: err.Error()}
}

func refusedCause(err error) string {
	var ue *unsentError
	if errors.As(err, &ue) && ue.dial && !errors.Is(ue.err, syscall.ECONNREFUSED) {
		return "cannot connect to the function: " + ue.err.Error()
	}
	return ErrRefused.Error()
}

// unsentError is an ErrUnsent with its cause: a failed dial, or the next
// hop's mark.
type unsentError struct {
	err  error
	dial bool
}

func (e *unsentError) Error() string        { return ErrUnsent.Error() + ": " + e.err.Error() }
func (e *unsentError) Unwrap() error        { return e.err }
func (e *unsentError) Is(target error) bool { return target == ErrUnsent }

// dialError wraps the error of a dial that failed: a timeout stays a
// timeout (the deadline has passed), running out of sockets stays that,
// and the rest mean the request can be sent elsewhere.
func dialError(err error) error {
	if isTimeout(err) || outOfResources(err) {
		return err
	}
	return &unsentError{err: err, dial: true}
}

// outOfResources reports whether err is this process running out of file
// descriptors or socket buffers: a fault of neither the client nor the
// function, and one that passes.
func outOfResources(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// UnsentHeader marks a queue-proxy's answer that its user process took
// nothing of the request (it refused the connection). The activator's
// Client turns the answer into ErrUnsent and sends the request elsewhere;
// the mark never reaches a client.
const UnsentHeader = wire.HeaderPrefix + "Unsent"

// ReadErrorStatus maps the error of reading a request's head (a fasthttp
// server's ErrorHandler) to the status the client gets; all are the
// client's fault.
func ReadErrorStatus(err error) (code int, msg string) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, ErrBodyTooLarge.Error()
	case errors.As(err, &small):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request header too large"
	case isTimeout(err):
		return fasthttp.StatusRequestTimeout, "request not received in time"
	}
	return fasthttp.StatusBadRequest, "malformed request"
}

// WriteError answers ctx's request with code and a JSON body, replacing
// whatever the response held. A 503 says when to retry: it means no
// capacity now. A request whose body came chunked is answered with
// Connection: close, since the hop may have left that body unread:
// fasthttp then reads at most 256 KiB more of it and closes the
// connection, but decides so only once the answer has gone without
// saying it, and a client told nothing would reuse the connection.
func WriteError(ctx *fasthttp.RequestCtx, code int, body []byte) {
	resp := &ctx.Response
	resp.Reset()
	resp.SetStatusCode(code)
	resp.Header.SetContentType("application/json")
	if code == fasthttp.StatusServiceUnavailable {
		resp.Header.Set("Retry-After", "1")
	}
	if ctx.Request.IsBodyStream() && ctx.Request.Header.ContentLength() == -1 {
		resp.SetConnectionClose()
	}
	resp.SetBodyRaw(body)
}

// WriteHTTPError is WriteError for a net/http request (one that came over
// HTTP/2).
func WriteHTTPError(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if code == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
