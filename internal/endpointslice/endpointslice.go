// Package endpointslice reads what the activator and the autoscaler need
// of a function's EndpointSlices: the addresses of its instances that can
// take work.
package endpointslice

import (
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// ReadyAddrs lists host:port of every endpoint that is ready and not
// terminating (an instance being drained takes no new work), once each, in
// a stable order. The port is the slice's port named portName; without
// one, fallback, or the slice's first port when fallback is 0. A slice
// with no port at all is skipped.
func ReadyAddrs(all []*discoveryv1.EndpointSlice, portName string, fallback int32) []string {
	var addrs []string
	for _, s := range all {
		p, ok := port(s.Ports, portName, fallback)
		if !ok {
			continue
		}
		port := strconv.Itoa(int(p))
		for _, e := range s.Endpoints {
			c := e.Conditions
			// A nil ready condition means ready (the API's convention).
			if (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) {
				continue
			}
			for _, a := range e.Addresses {
				addrs = append(addrs, net.JoinHostPort(a, port))
			}
		}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

func port(ports []discoveryv1.EndpointPort, name string, fallback int32) (int32, bool) {
	for _, p := range ports {
		if p.Name != nil && *p.Name == name && p.Port != nil {
			return *p.Port, true
		}
	}
	if fallback != 0 {
		return fallback, true
	}
	if len(ports) > 0 && ports[0].Port != nil {
		return *ports[0].Port, true
	}
	return 0, false
}
