package local

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The kept lines are bounded in number and bytes; a follower that does
// not read loses lines, is told how many, and never holds add back.
func TestLogsBounds(t *testing.T) {
	var l logs
	for i := range maxLogLines + 10 {
		l.add("ns", "fn", "ns/fn#1", fmt.Sprint("line ", i))
	}
	got := l.tail("ns", "fn", time.Time{}, 0)
	if len(got) != maxLogLines || got[0].Line != "line 10" {
		t.Fatalf("%d lines kept, first %q; want the last %d", len(got), got[0].Line, maxLogLines)
	}
	if got := l.tail("ns", "fn", time.Time{}, 3); len(got) != 3 || got[2].Line != fmt.Sprint("line ", maxLogLines+9) {
		t.Errorf("tail 3: %+v", got)
	}
	long := strings.Repeat("x", 4<<10)
	for range 100 {
		l.add("ns", "big", "ns/big#1", long)
	}
	if got := l.tail("ns", "big", time.Time{}, 0); len(got)*len(long) > maxLogBytes {
		t.Errorf("%d lines of 4 KiB kept, over %d bytes", len(got), maxLogBytes)
	}

	_, fl, stop := l.follow("ns", "fn", time.Now(), 0)
	defer stop()
	for i := range followerQueue + 5 { // nobody reads
		l.add("ns", "fn", "ns/fn#1", fmt.Sprint("new ", i))
	}
	for range followerQueue {
		<-fl.lines
	}
	l.add("ns", "fn", "ns/fn#1", "after")
	if ll := <-fl.lines; ll.Line != "after" || ll.Dropped != 5 {
		t.Errorf("next line %+v, want 'after' telling of 5 dropped", ll)
	}
}
