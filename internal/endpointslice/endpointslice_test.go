package endpointslice

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func ptr[T any](v T) *T { return &v }

func TestReadyAddrs(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr(true)}
	named := []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8012))}, {Name: ptr("admin"), Port: ptr(int32(9091))}}
	slice := &discoveryv1.EndpointSlice{Ports: named, Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.2"}, Conditions: ready},
		{Addresses: []string{"10.0.0.1"}},                                                                // nil ready: ready
		{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}}, // not ready
		{Addresses: []string{"10.0.0.4"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Terminating: ptr(true)}},
		{Addresses: []string{"fd00::1"}, Conditions: ready},
	}}
	again := &discoveryv1.EndpointSlice{Ports: named, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.2"}, Conditions: ready}}}
	unnamed := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Port: ptr(int32(80))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.1.1"}, Conditions: ready}}}
	portless := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.2.1"}, Conditions: ready}}}
	tests := []struct {
		name     string
		port     string
		fallback int32
		want     []string
	}{
		{"by name", "http", 0, []string{"10.0.0.1:8012", "10.0.0.2:8012", "10.0.1.1:80", "[fd00::1]:8012"}},
		{"other name", "admin", 9091, []string{"10.0.0.1:9091", "10.0.0.2:9091", "10.0.1.1:9091", "10.0.2.1:9091", "[fd00::1]:9091"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadyAddrs([]*discoveryv1.EndpointSlice{slice, again, unnamed, portless}, tt.port, tt.fallback)
			if !slices.Equal(got, tt.want) {
				t.Errorf("ReadyAddrs = %v, want %v", got, tt.want)
			}
		})
	}
}
