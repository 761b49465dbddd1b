package forward

import (
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
