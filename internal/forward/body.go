package forward

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// HoldMax is the largest request body a hop reads whole before it sends
// the request: such a request can be sent again when an instance refuses
// it (resendable), and a client slow to send it holds no instance's slot
// meanwhile. Larger bodies stream.
const HoldMax = 16 << 10

var heldBodies = sync.Pool{New: func() any { b := make([]byte, HoldMax); return &b }}

// HoldBody reads a streamed body of known length up to HoldMax into
// memory, giving the client cc's read timeout for each read, up to
// deadline, as streaming does. It returns the buffer to give back with
// ReleaseBody once the request has been sent, or nil when it held nothing.
// An error is the client's (Classify).
func HoldBody(req *fasthttp.Request, cc *Conn, deadline time.Time) (*[]byte, error) {
	cl := req.Header.ContentLength()
	stream := req.BodyStream()
	if stream == nil || cl <= 0 || cl > HoldMax {
		return nil, nil
	}
	buf := heldBodies.Get().(*[]byte)
	src := clientBody{r: stream, cc: cc, deadline: deadline}
	if n, err := io.ReadFull(&src, (*buf)[:cl]); err != nil {
		heldBodies.Put(buf)
		return nil, fmt.Errorf("%w: %d of %d bytes", bodyError(src.err), n, cl)
	}
	req.SetBodyRaw((*buf)[:cl])
	return buf, nil
}

// ReleaseBody gives back a buffer HoldBody returned for req.
func ReleaseBody(req *fasthttp.Request, buf *[]byte) {
	if buf != nil {
		req.ResetBody()
		heldBodies.Put(buf)
	}
}

// ReadBody reads a request's whole body into a new slice, up to limit
// bytes (ErrBodyTooLarge beyond), giving the client cc's read timeout for
// each read, up to deadline: for a request that is kept, not forwarded (a
// run's). An error is the client's (Classify).
func ReadBody(req *fasthttp.Request, cc *Conn, deadline time.Time, limit int64) ([]byte, error) {
	if cl := req.Header.ContentLength(); cl > 0 && int64(cl) > limit {
		return nil, ErrBodyTooLarge
	}
	stream := req.BodyStream()
	if stream == nil {
		if b := req.Body(); int64(len(b)) <= limit {
			return bytes.Clone(b), nil
		}
		return nil, ErrBodyTooLarge
	}
	src := clientBody{r: stream, cc: cc, deadline: deadline}
	b, err := io.ReadAll(io.LimitReader(&src, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %d bytes read", bodyError(src.err), len(b))
	case int64(len(b)) > limit:
		return nil, ErrBodyTooLarge
	case req.Header.ContentLength() > 0 && len(b) < req.Header.ContentLength():
		return nil, fmt.Errorf("%w: %d of %d bytes", ErrBadBody, len(b), req.Header.ContentLength())
	}
	return b, nil
}
