package shard

import (
	"fmt"
	"slices"
	"testing"
)

func TestDeal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		members []string
		want    []string
	}{
		{"none", 3, nil, []string{"", "", ""}},
		{"one takes all", 3, []string{"a"}, []string{"a", "a", "a"}},
		{"two share evenly", 4, []string{"b", "a"}, []string{"a", "b", "a", "b"}},
		{"uneven by one at most", 5, []string{"c", "a", "b"}, []string{"a", "b", "c", "a", "b"}},
		{"a name twice counts once", 2, []string{"a", "a", "b"}, []string{"a", "b"}},
		{"more members than buckets", 2, []string{"c", "b", "a"}, []string{"a", "b"}},
	} {
		if got := Deal(tc.n, tc.members); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Deal(%d, %v) = %v, want %v", tc.name, tc.n, tc.members, got, tc.want)
		}
	}
}

// TestBucketSpreads: 10,000 functions over DefaultBuckets fall within a
// fifth of the even share in every bucket, so two replicas holding five
// buckets each hold about half the functions.
func TestBucketSpreads(t *testing.T) {
	counts := make([]int, DefaultBuckets)
	const functions = 10000
	for i := range functions {
		b := Bucket(fmt.Sprintf("ns-%03d", i%100), fmt.Sprintf("fn-%05d", i), DefaultBuckets)
		if b != Bucket(fmt.Sprintf("ns-%03d", i%100), fmt.Sprintf("fn-%05d", i), DefaultBuckets) {
			t.Fatal("a function's bucket changed between two calls")
		}
		counts[b]++
	}
	even := functions / DefaultBuckets
	for b, c := range counts {
		if c < even*4/5 || c > even*6/5 {
			t.Errorf("bucket %d holds %d of %d functions, want %d ± 20%%: %v", b, c, functions, even, counts)
		}
	}
	if Bucket("a", "bc", 1000) == Bucket("ab", "c", 1000) && Bucket("x", "yz", 1000) == Bucket("xy", "z", 1000) {
		t.Error("the namespace and name are not kept apart in the hash")
	}
}
