package forward

import (
	"bufio"
	"bytes"
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
		upgrade    Upgrade
	}{
		{"plain", "Host: x\r\nX-A: 1\r\n", &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)},
			"Host: x\r\nX-A: 1\r\nX-Forwarded-For: 10.0.0.1\r\n", NoUpgrade},
		{"appends to a prior hop", "Host: x\r\nX-Forwarded-For: 203.0.113.7\r\n", &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1")},
			"Host: x\r\nX-Forwarded-For: 203.0.113.7, 127.0.0.1\r\n", NoUpgrade},
		{"hop-by-hop go, repeated fields keep their order",
			"Host: x\r\nKeep-Alive: 5\r\nX-M: one\r\nTe: trailers\r\nX-M: two\r\nConnection: close\r\nX-M: three\r\nUpgrade: h2c\r\n", nil,
			"Host: x\r\nX-M: one\r\nX-M: two\r\nX-M: three\r\n", NoUpgrade},
		{"hop-by-hop without repeats", "Host: x\r\nProxy-Authorization: secret\r\nX-A: 1\r\nX-B: 2\r\n", nil,
			"Host: x\r\nX-A: 1\r\nX-B: 2\r\n", NoUpgrade},
		{"cookies pass as they came", "Host: x\r\nCookie: a=1;b=2\r\nX-A: 1\r\n", nil,
			"Host: x\r\nCookie: a=1;b=2\r\nX-A: 1\r\n", NoUpgrade},
		{"cookies pass as they came, hop-by-hop gone", "Host: x\r\nCookie: a=1;b=2\r\nTe: trailers\r\n", nil,
			"Host: x\r\nCookie: a=1;b=2\r\n", NoUpgrade},
		{"Connection's options and the fields it names go", "Host: x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: a\r\nX-A: 1\r\n", nil,
			"Host: x\r\nX-A: 1\r\n", NoUpgrade},
		{"every Connection field's names go", "Host: x\r\nConnection: X-One\r\nX-One: 1\r\nConnection: close, X-Two\r\nX-Two: 2\r\nX-A: 1\r\n", nil,
			"Host: x\r\nX-A: 1\r\n", NoUpgrade},
		{"Connection cannot remove what frames and routes the request",
			"Host: x\r\nContent-Length: 0\r\nConnection: Host, content-length, Transfer-Encoding\r\nX-A: 1\r\n", nil,
			"Host: x\r\nContent-Length: 0\r\nX-A: 1\r\n", NoUpgrade},
		{"a WebSocket upgrade passes, alone", "Host: x\r\nConnection: keep-alive, Upgrade, X-Hop\r\nX-Hop: 1\r\nUpgrade: WebSocket\r\nSec-WebSocket-Key: k\r\n", nil,
			"Host: x\r\nSec-Websocket-Key: k\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n", UpgradeWebSocket},
		{"an Upgrade not named by Connection is no upgrade", "Host: x\r\nUpgrade: websocket\r\n", nil,
			"Host: x\r\n", NoUpgrade},
		{"h2c is served as HTTP/1.1", "Host: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\n", nil,
			"Host: x\r\n", NoUpgrade},
		{"any other upgrade is refused", "Host: x\r\nConnection: upgrade\r\nUpgrade: h2c, IRC/6.9\r\n", nil,
			"Host: x\r\n", UpgradeUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET /p?q=1 HTTP/1.1\r\n" + tt.head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			if up := PrepareRequest(&req, tt.remote); up != tt.upgrade {
				t.Errorf("PrepareRequest = %d, want %d", up, tt.upgrade)
			}
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

// A function's response loses its Connection and Keep-Alive fields, and
// those Connection names: they describe its connection to the proxy, not
// the caller's.
func TestPrepareResponse(t *testing.T) {
	var resp fasthttp.Response
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\n" +
		"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-A: 1\r\n\r\nok"
	if err := resp.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	PrepareResponse(&resp)
	for _, hop := range []string{"Connection", "Keep-Alive", "X-Hop"} {
		if v := resp.Header.Peek(hop); v != nil {
			t.Errorf("%s: %q stayed", hop, v)
		}
	}
	var cookies []string
	for k, v := range resp.Header.All() {
		if string(k) == "Set-Cookie" {
			cookies = append(cookies, string(v))
		}
	}
	if string(resp.Header.Peek("X-A")) != "1" || !slices.Equal(cookies, []string{"a=1", "b=2"}) || resp.ConnectionClose() {
		t.Errorf("after PrepareResponse: %q, cookies %q", resp.Header.String(), cookies)
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

// TestStripReserved: a client's headers of the platform's prefix, in any
// case, go, and PrepareRequest after it does not bring them back; the
// others stay, a repeated field's values in order, cookies as they came.
func TestStripReserved(t *testing.T) {
	tests := []struct{ name, head, want string }{
		{"none", "Host: x\r\nX-A: 1\r\nCookie: a=1;b=2\r\n", "Host: x\r\nX-A: 1\r\nCookie: a=1;b=2\r\n"},
		{"forged trigger headers",
			"Host: x\r\nSless-Message-Id: m1\r\nsless-delivery-count: 1\r\nSLESS-TRIGGER: orders\r\nX-A: 1\r\nSless-Queue: q\r\nSless-Scheduled-Time: 2026-01-01T00:00:00Z\r\nSless-Unsent: 1\r\n",
			"Host: x\r\nX-A: 1\r\n"},
		{"repeated fields keep their order",
			"Host: x\r\nX-M: one\r\nSless-Trigger: a\r\nX-M: two\r\nSless-Trigger: b\r\nX-M: three\r\n",
			"Host: x\r\nX-M: one\r\nX-M: two\r\nX-M: three\r\n"},
		{"then hop-by-hop go too", "Host: x\r\nX-M: one\r\nSless-Queue: q\r\nTe: trailers\r\nX-M: two\r\nX-M: three\r\n",
			"Host: x\r\nX-M: one\r\nX-M: two\r\nX-M: three\r\n"},
		{"a name that only starts alike stays", "Host: x\r\nSlessy: 1\r\nX-Sless-Trigger: 2\r\n", "Host: x\r\nSlessy: 1\r\nX-Sless-Trigger: 2\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\n" + tt.head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			StripReserved(&req.Header)
			PrepareRequest(&req, nil) // which must not bring them back
			got := strings.TrimPrefix(req.Header.String(), "GET / HTTP/1.1\r\n")
			if sortedLines(got) != sortedLines(tt.want+"\r\n") {
				t.Errorf("headers after StripReserved:\n%q\nwant\n%q", got, tt.want)
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

func TestStripReservedAllocatesNothing(t *testing.T) {
	var req fasthttp.Request
	head := "GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\nAccept: */*\r\nX-Request-Id: abc\r\nCookie: a=1\r\n\r\n"
	if err := req.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { StripReserved(&req.Header) }); allocs != 0 {
		t.Errorf("StripReserved allocates %.0f times without reserved headers, want 0", allocs)
	}
}

// The forwarding fields are the platform's alone: a client's, in any
// case and however many, are replaced; a trusted proxy's host and scheme
// stay, and its prefix is replaced.
func TestSetForwarded(t *testing.T) {
	for _, head := range []string{
		"Host: fn.test\r\nX-A: 1\r\n",
		"Host: fn.test\r\nx-forwarded-host: evil.test\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: ftp\r\nX-FORWARDED-PREFIX: /x\r\nX-A: 1\r\n",
	} {
		for _, trusted := range []bool{false, true} {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET /p HTTP/1.1\r\n" + head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			SetForwarded(&req.Header, "/fn/ns/hello", trusted)
			for name, want := range map[string]string{ForwardedPrefixHeader: "/fn/ns/hello", "X-A": "1", "Host": "fn.test"} {
				if got := req.Header.PeekAll(name); len(got) != 1 || string(got[0]) != want {
					t.Errorf("%q, trusted %v: %s = %q, want %q alone", head, trusted, name, got, want)
				}
			}
			for _, name := range []string{ForwardedHostHeader, ForwardedProtoHeader} {
				sent := strings.Contains(strings.ToLower(head), strings.ToLower(name))
				if got := req.Header.Peek(name); (got != nil) != (trusted && sent) {
					t.Errorf("%q, trusted %v: %s is %q", head, trusted, name, got)
				}
			}
		}
	}
}

// BenchmarkSetForwarded is a client's request without forwarding fields,
// read and given the platform's: the read is the floor to compare with.
func BenchmarkSetForwarded(b *testing.B) {
	head := []byte("GET /p HTTP/1.1\r\nHost: fn.test\r\nUser-Agent: bench\r\nAccept: */*\r\nX-Request-Id: 1\r\nContent-Type: text/plain\r\n\r\n")
	for _, set := range []bool{false, true} {
		b.Run(map[bool]string{false: "read only", true: "read and set"}[set], func(b *testing.B) {
			var req fasthttp.Request
			r := bytes.NewReader(head)
			br := bufio.NewReader(r)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(head)
				br.Reset(r)
				if err := req.Header.Read(br); err != nil {
					b.Fatal(err)
				}
				if set {
					SetForwarded(&req.Header, "/fn/ns/hello", false)
				}
			}
		})
	}
}
