// Package shard divides the functions among the autoscaler's replicas, so
// that each decides for its share and a second replica halves the work
// rather than waiting as a standby (issue 40; Knative's bucketed leader
// election is the model). Functions hash into a fixed number of buckets;
// the live replicas, each announced by a Lease of its own, deal the
// buckets out among themselves in a fixed order, and a replica acts on a
// bucket only while it holds the bucket's Lease. The replicas' Leases are
// renewed; the buckets' are written only when they change hands, so the
// writes do not grow with the buckets.
package shard

import (
	"hash/fnv"
	"slices"
)

// DefaultBuckets is how many buckets the functions hash into: enough to
// share them evenly among up to five replicas, few enough that a change
// of hands is a handful of writes.
const DefaultBuckets = 10

// Bucket is the bucket of a function, of n.
func Bucket(namespace, name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// Deal gives each of n buckets a member: the members in order of name,
// bucket b to the (b mod len)-th, so that every member has n/len buckets
// or one more, and every replica seeing the same members deals the same.
// With no members every bucket is "".
func Deal(n int, members []string) []string {
	sorted := slices.Sorted(slices.Values(members))
	sorted = slices.Compact(sorted)
	out := make([]string, n)
	if len(sorted) == 0 {
		return out
	}
	for b := range out {
		out[b] = sorted[b%len(sorted)]
	}
	return out
}
