package forward

import (
	"bufio"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestPrepareRequest(t *testing.T) {
	tests := []struct {
		name, head string
		remote     net.Addr
		want       string // the headers after the request line
	}{
		{"plain", "Host: x\r\nX-A: 1\r\n", &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)},
			"Host: x\r\nX-A: 1\r\nX-Forwarded-For: 10.0.0.1\r\n"},
		{"appends to a prior hop", "Host: x\r\nX-Forwarded-For: 203.0.113.7\r\n", &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1")},
			"Host: x\r\nX-Forwarded-For: 203.0.113.7, 127.0.0.1\r\n"},
		{"hop-by-hop go, repeated fields keep their order",
			"Host: x\r\nKeep-Alive: 5\r\nX-M: one\r\nTe: trailers\r\nX-M: two\r\nConnection: close\r\nX-M: three\r\nUpgrade: h2c\r\n", nil,
			"Host: x\r\nX-M: one\r\nX-M: two\r\nX-M: three\r\n"},
		{"hop-by-hop without repeats", "Host: x\r\nProxy-Authorization: secret\r\nX-A: 1\r\nX-B: 2\r\n", nil,
			"Host: x\r\nX-A: 1\r\nX-B: 2\r\n"},
		{"cookies pass as they came", "Host: x\r\nCookie: a=1;b=2\r\nX-A: 1\r\n", nil,
			"Host: x\r\nCookie: a=1;b=2\r\nX-A: 1\r\n"},
		{"cookies pass as they came, hop-by-hop gone", "Host: x\r\nCookie: a=1;b=2\r\nTe: trailers\r\n", nil,
			"Host: x\r\nCookie: a=1;b=2\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET /p?q=1 HTTP/1.1\r\n" + tt.head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			PrepareRequest(&req, tt.remote)
			// The order of different fields is free (RFC 9110 5.3); that
			// of a repeated field's values is not.
			got := strings.TrimPrefix(req.Header.String(), "GET /p?q=1 HTTP/1.1\r\n")
			if sortedLines(got) != sortedLines(tt.want+"\r\n") {
				t.Errorf("headers after PrepareRequest:\n%q\nwant\n%q", got, tt.want)
			}
			var values []string
			for _, v := range req.Header.PeekAll("X-M") {
				values = append(values, string(v))
			}
			if strings.Contains(tt.want, "X-M") && strings.Join(values, ",") != "one,two,three" {
				t.Errorf("X-M values in order %q, want one,two,three", values)
			}
		})
	}
}

func sortedLines(s string) string {
	lines := strings.Split(s, "\r\n")
	slices.Sort(lines)
	return strings.Join(lines, "|")
}

func TestPrepareRequestAllocatesNothing(t *testing.T) {
	var req fasthttp.Request
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}
	allocs := testing.AllocsPerRun(100, func() {
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		PrepareRequest(&req, remote)
	})
	if allocs != 0 {
		t.Errorf("PrepareRequest allocates %.0f times, want 0", allocs)
	}
}
