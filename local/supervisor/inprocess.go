package supervisor

import (
	"net"
	"time"

	"sless.dev/sless/internal/forward"
)

// Dial connects to the queue-proxy serving addr: in memory when it is one
// of this supervisor's instances (the activator of the local platform
// lives in the same process), so that a request crosses no socket between
// the two hops; over TCP otherwise. It is the activator's dialer in
// local mode (activator.Config.Dial). An instance that has stopped serving
// refuses the connection either way, and the request goes to another.
func (s *Supervisor) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	if l := s.inProcess(addr); l != nil {
		return l.Dial(timeout)
	}
	return net.DialTimeout("tcp", addr, timeout)
}

// inProcess finds the in-memory listener of the instance serving addr.
// Connections are pooled, so dials are few: a walk over the instances
// costs less than keeping an index beside them.
func (s *Supervisor) inProcess(addr string) *forward.MemListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.fns {
		for _, in := range f.insts {
			if in.ep.Addr == addr {
				return in.ep.inProcess
			}
		}
	}
	return nil
}
