package supervisor

import (
	"net"
	"strconv"
	"testing"
)

// Runtime ports lie below the ephemeral range, are not handed out twice
// while in use, skip what another program listens on, and come back once
// released.
func TestPorts(t *testing.T) {
	if p := newPorts(); p.hi != ephemeralLow() || p.lo >= p.hi || p.next < p.lo || p.next >= p.hi {
		t.Errorf("newPorts: [%d, %d) from %d, want a range ending at the ephemeral range's start %d", p.lo, p.hi, p.next, ephemeralLow())
	}
	// Three free ports of the range, the middle one then taken by
	// another listener.
	lo := freeRun(t, newPorts().lo, 3)
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lo+1))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	p := &ports{lo: lo, hi: lo + 3, next: lo, inUse: map[int]bool{}}
	first, err := p.take()
	if err != nil || first != lo {
		t.Fatalf("take = %d, %v; want %d", first, err, lo)
	}
	second, err := p.take()
	if err != nil || second != lo+2 {
		t.Fatalf("take = %d, %v; want %d, past the one in use elsewhere", second, err, lo+2)
	}
	if port, err := p.take(); err == nil {
		t.Fatalf("take with every port in use = %d, want an error", port)
	}
	p.release(first)
	if port, err := p.take(); err != nil || port != first {
		t.Errorf("take after a release = %d, %v; want %d again", port, err, first)
	}
}

// freeRun returns the first of n ports in a row from start that nothing
// listens on.
func freeRun(t *testing.T, start, n int) int {
	t.Helper()
	for lo := start; lo < start+1000; lo++ {
		free := true
		for port := lo; port < lo+n && free; port++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if free = err == nil; free {
				l.Close()
			}
		}
		if free {
			return lo
		}
	}
	t.Fatalf("no %d free ports in a row from %d", n, start)
	return 0
}
