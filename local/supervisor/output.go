package supervisor

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// Bounds of what an instance's output keeps: the last lines, for the
// error a crash reports; the lines a quiet instance holds back; and the
// longest line passed on whole.
const (
	tailLines   = 5
	heldLines   = 200
	maxLineSize = 4 << 10
)

// output passes a process's output on line by line, each prefixed with the
// instance's name, and keeps the last lines. A quiet output holds its
// lines until release, so that a function retried after a crash prints
// its traceback once, not at every retry; sink sees every line at once.
type output struct {
	w      io.Writer
	prefix string
	sink   func(line string)

	mu      sync.Mutex
	partial []byte
	last    []string
	held    []string // while quiet; the first heldLines
	quiet   bool
}

func newOutput(w io.Writer, name string, quiet bool, sink func(string)) *output {
	return &output{w: w, prefix: name + " | ", quiet: quiet, sink: sink}
}

// Write is called by the process's stdout and stderr copiers.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.partial = append(o.partial, p[:min(len(p), maxLineSize-len(o.partial))]...)
			if len(o.partial) == maxLineSize {
				o.line()
			}
			break
		}
		o.partial = append(o.partial, p[:min(i, maxLineSize-len(o.partial))]...)
		o.line()
		p = p[i+1:]
	}
	return n, nil
}

// line emits the partial line. Called with o.mu held.
func (o *output) line() {
	s := string(o.partial)
	o.partial = o.partial[:0]
	o.sink(s)
	switch {
	case !o.quiet:
		_, _ = io.WriteString(o.w, o.prefix+s+"\n")
	case len(o.held) < heldLines:
		o.held = append(o.held, s)
	}
	if len(o.last) == tailLines {
		o.last = o.last[1:]
	}
	o.last = append(o.last, s)
}

// release ends a quiet output's hold: the instance is ready, so its
// output is news again.
func (o *output) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.held {
		_, _ = io.WriteString(o.w, o.prefix+s+"\n")
	}
	o.held, o.quiet = nil, false
}

// tail is the last lines, for an error message: empty when there were
// none.
func (o *output) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		o.line()
	}
	if len(o.last) == 0 {
		return ""
	}
	return "; last output: " + strings.Join(o.last, " / ")
}
