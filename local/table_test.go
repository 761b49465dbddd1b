package local

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// writes records each Write whole.
type writes struct {
	mu  sync.Mutex
	all []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, string(p))
	return len(p), nil
}

func (w *writes) find(s string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, one := range w.all {
		if strings.Contains(one, s) {
			return one, true
		}
	}
	return "", false
}

// The start-up table is one write, header to console line, so that the
// lines the platform and its functions write meanwhile cannot fall
// between its rows.
func TestTableInOneWrite(t *testing.T) {
	out := &writes{}
	p := runPlatform(t, serversDir, time.Second, func(o *Options) { o.Out = out })
	var table string
	p.waitFor("the table", time.Minute, func() bool {
		var ok bool
		table, ok = out.find("FUNCTION")
		return ok
	})
	for _, want := range []string{"default/server-node", "default/server-python", "console: http://" + p.AdminAddr()} {
		if !strings.Contains(table, want) {
			t.Errorf("the table's write lacks %q:\n%s", want, table)
		}
	}
}
