// Package activatortest holds what the tests of an activator's hosts (the
// local platform, the Kubernetes feed) share, as httptest is to http.
package activatortest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Waiters are requests sent to a function that cannot answer yet, so that
// they wait in the activator.
type Waiters struct {
	n       int
	answers chan answer
}

type answer struct {
	code int
	body string
	at   time.Time
}

// Wait sends n GETs to url at once, each given up by its client after
// timeout: shorter than the function's own, so that a request the
// activator leaves waiting fails the test rather than get a 504.
func Wait(url string, n int, timeout time.Duration) *Waiters {
	w := &Waiters{n: n, answers: make(chan answer, n)}
	client := &http.Client{Timeout: timeout}
	for range n {
		go func() {
			resp, err := client.Get(url)
			if err != nil {
				w.answers <- answer{code: -1, body: err.Error(), at: time.Now()}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			w.answers <- answer{resp.StatusCode, string(body), time.Now()}
		}()
	}
	return w
}

// ExpectRemoved checks that every request was answered 404, naming the
// function namespace/name as removed, soon after removed (the time of its
// removal) rather than at its timeout.
func (w *Waiters) ExpectRemoved(t testing.TB, namespace, name string, removed time.Time) {
	t.Helper()
	for range w.n {
		got := <-w.answers
		if got.code != http.StatusNotFound || !strings.Contains(got.body, `"function":"`+name+`"`) ||
			!strings.Contains(got.body, namespace+"/"+name+" was removed") {
			t.Errorf("a waiting request got %d %q, want a 404 naming the removed function", got.code, got.body)
		}
		if after := got.at.Sub(removed); after > 30*time.Second {
			t.Errorf("answered %v after the removal, want at once", after)
		}
	}
}
