// Package badclient sends requests as misbehaving clients do, over a raw
// socket, for tests of every hop of the request path: each such request is
// the client's fault and must get its 4xx, never a 502 counted against the
// function.
package badclient

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Case is one misbehaving request and the status it must get.
type Case struct {
	Name string
	// Request is sent as is; Stall, when set, keeps the connection open
	// without sending more, as a client whose body never comes does.
	Request string
	Want    int
}

// Cases are the misbehaving requests for path on a hop whose body limit is
// maxBody: over forward.HoldMax, so that the bodies that stop coming are
// both one a hop reads whole and one it streams. The ones that stall need
// the hop's read timeout to end them.
func Cases(path string, maxBody int) []Case {
	chunk := strings.Repeat("x", maxBody+1)
	return []Case{
		{"chunked body over the limit", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(chunk)), 16) + "\r\n" + chunk + "\r\n0\r\n\r\n", http.StatusRequestEntityTooLarge},
		// The hop answers once it has the head and a first part of the body.
		{"content length over the limit", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nContent-Length: " +
			strconv.Itoa(maxBody+1) + "\r\n\r\n" + chunk[:16<<10], http.StatusRequestEntityTooLarge},
		// Refused from the head: none of the body is sent, nor invited
		// by a 100 Continue.
		{"content length over the limit, body held back", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nContent-Length: " +
			strconv.Itoa(maxBody+1) + "\r\n\r\n", http.StatusRequestEntityTooLarge},
		{"expect 100-continue over the limit", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nExpect: 100-continue\r\nContent-Length: " +
			strconv.Itoa(maxBody+1) + "\r\n\r\n", http.StatusRequestEntityTooLarge},
		{"HTTP/1.0 without Host", "GET " + path + " HTTP/1.0\r\n\r\n", http.StatusOK},
		{"HTTP/1.0 with a body", "POST " + path + " HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", http.StatusOK},
		{"malformed chunk size", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
			http.StatusBadRequest},
		// Over every hop's limit: the activator's 16 KiB and the
		// queue-proxy's 32 KiB (forward.MaxHeadBytes, InnerHeadBytes).
		{"headers too large", "GET " + path + " HTTP/1.1\r\nHost: fn\r\nX-Big: " + strings.Repeat("h", 40<<10) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge},
		{"small body never comes", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nContent-Length: 10\r\n\r\nabc",
			http.StatusRequestTimeout},
		{"large body stops coming", "POST " + path + " HTTP/1.1\r\nHost: fn\r\nContent-Length: " + strconv.Itoa(maxBody) +
			"\r\n\r\n" + strings.Repeat("y", maxBody/2), http.StatusRequestTimeout},
	}
}

// Send sends c's request to addr and returns the status answered, failing
// the test when no answer comes within wait.
func Send(t *testing.T, addr string, c Case, wait time.Duration) int {
	t.Helper()
	code, err := Do(addr, c, wait)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return code
}

// Do sends c's request to addr and returns the status answered within
// wait.
func Do(addr string, c Case, wait time.Duration) (int, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	// A hop may answer and close before it has read everything (headers
	// too large): the answer is what counts, not the write.
	_, _ = conn.Write([]byte(c.Request))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, fmt.Errorf("no answer: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Slowloris keeps n connections to addr open for d, each sending a
// request head one byte every interval, and opens a new one whenever the
// server closes one (answered, cut off or refused). It returns the longest
// any connection lasted: a server that sheds them keeps it near its read
// timeout.
func Slowloris(addr string, n int, every, d time.Duration) (longest time.Duration) {
	const head = "GET / HTTP/1.1\r\nHost: slow\r\nX-Slow: "
	deadline := time.Now().Add(d)
	lasted := make(chan time.Duration, n)
	for range n {
		go func() {
			var worst time.Duration
			for time.Now().Before(deadline) {
				start := time.Now()
				if !slowConn(addr, head, every, deadline) {
					time.Sleep(every) // refused: the backlog is full
				}
				worst = max(worst, time.Since(start))
			}
			lasted <- worst
		}()
	}
	for range n {
		longest = max(longest, <-lasted)
	}
	return longest
}

// slowConn is one slowloris connection, until the server closes it or
// deadline passes; it reports whether it connected.
func slowConn(addr, head string, every time.Duration, deadline time.Time) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	cut := make(chan struct{})
	go func() {
		_, _ = conn.Read(make([]byte, 1)) // an answer, the close or the deadline
		close(cut)
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		b := byte('x')
		if i < len(head) {
			b = head[i]
		}
		if _, err := conn.Write([]byte{b}); err != nil {
			return true
		}
		select {
		case <-cut:
			return true
		case <-t.C:
		}
	}
}
