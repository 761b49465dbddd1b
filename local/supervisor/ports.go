package supervisor

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ports hands out the ports runtime processes listen on. A runtime binds
// its port itself, after the supervisor chose it, so the choice must stay
// free in between: a port from the kernel's ephemeral range would not (it
// was what freePort gave), since any bind to port 0 in sless dev (a
// queue-proxy's, say) may take it first. At 1,000 cold starts, 1 to 4 a
// run clashed so, and an instance whose own queue-proxy took its port
// proxied to itself until sless dev ran out of files. These ports lie
// below the ephemeral range, where neither binds to port 0 nor outgoing
// connections land, and are not handed out twice while in use.
type ports struct {
	mu     sync.Mutex
	lo, hi int // [lo, hi)
	next   int
	inUse  map[int]bool
}

// portSpan is how many ports below the ephemeral range are used.
const portSpan = 10_000

func newPorts() *ports {
	ephemeral := ephemeralLow()
	lo := max(ephemeral-portSpan, 1024)
	return &ports{lo: lo, hi: ephemeral, next: lo + rand.IntN(ephemeral-lo), inUse: map[int]bool{}}
}

// ephemeralLow is the first port of the kernel's ephemeral range (the
// usual default where it cannot be read).
func ephemeralLow() int {
	const usual = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return usual
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return usual
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 1024+portSpan/10 {
		return usual
	}
	return lo
}

// take returns a port no instance has and nothing listens on now; a
// start from a random place keeps two sless devs apart.
func (p *ports) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.hi - p.lo {
		port := p.next
		p.next++
		if p.next == p.hi {
			p.next = p.lo
		}
		if p.inUse[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // another program's
		}
		l.Close()
		p.inUse[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port for the runtime in %d-%d", p.lo, p.hi-1)
}

// release gives back a port whose runtime process has exited.
func (p *ports) release(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inUse, port)
}
