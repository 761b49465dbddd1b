package queueproxy

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"sless.dev/sless/internal/eventually"
)

// A streamed answer is bounded by the silence between its bytes and by
// the request's maximum duration, not by the timeout, which bounds its
// start: cut, the client sees it broken and it counts as a 504; in
// HTTP/1.1 and HTTP/2 alike.
func TestStreamLimits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		set     func(*Config)
		atLeast time.Duration // the stream's life
	}{
		{"idle", func(c *Config) { c.IdleTimeout = 500 * time.Millisecond }, 0},
		{"max duration past the timeout", func(c *Config) { c.Timeout, c.MaxDuration = 500*time.Millisecond, 2*time.Second }, 1500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, tt.set)
			for i, client := range []*http.Client{http.DefaultClient, h2cClient()} {
				start := time.Now()
				resp, err := client.Get(h.url + "/drip?id=" + url.QueryEscape(tt.name) + strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || err == nil || len(body) != 100<<10 {
					t.Errorf("%s: %d, %d bytes, %v: want the head's 200, then the answer cut (%.100q)", resp.Proto, resp.StatusCode, len(body), err, body)
				}
				if d := time.Since(start); d < tt.atLeast {
					t.Errorf("%s: cut after %v, want %v at least", resp.Proto, d, tt.atLeast)
				}
				eventually.True(t, "the cut answer counted as a 504", func() bool {
					return h.counter("sless_queueproxy_requests_total", "code", "504") == float64(i+1)
				})
			}
		})
	}
}
