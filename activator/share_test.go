package activator

import "testing"

func TestShare(t *testing.T) {
	tests := []struct {
		name                        string
		concurrency, instances      int
		peers                       Peers
		first, step, capacity, want int // want: instances taken
	}{
		{"one activator", 4, 3, Peers{1, 0}, 0, 1, 4, 3},
		{"place unknown", 4, 3, Peers{2, -1}, 0, 1, 4, 3},
		{"unlimited", 0, 3, Peers{2, 1}, 0, 1, 0, 3},
		{"no instance", 4, 0, Peers{2, 1}, 0, 1, 4, 0},
		{"slices: first of two", 4, 5, Peers{2, 0}, 0, 2, 4, 3},
		{"slices: second of two", 4, 5, Peers{2, 1}, 1, 2, 4, 2},
		{"shared: 2 activators, 1 instance, concurrency 4", 4, 1, Peers{2, 1}, 0, 1, 2, 1},
		{"shared: remainder to the first", 3, 1, Peers{2, 0}, 0, 1, 2, 1},
		{"shared: remainder, the second", 3, 1, Peers{2, 1}, 0, 1, 1, 1},
		{"shared: at least one slot", 1, 1, Peers{3, 2}, 0, 1, 1, 1},
		{"shared: 5 activators, 2 instances", 6, 2, Peers{5, 4}, 0, 2, 2, 1},
		{"shared: 5 activators, 2 instances, odd one", 6, 2, Peers{5, 3}, 1, 2, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, step, capacity := share(tt.concurrency, tt.instances, tt.peers)
			taken := 0
			for j := range tt.instances {
				if j%step == first {
					taken++
				}
			}
			if first != tt.first || step != tt.step || capacity != tt.capacity || taken != tt.want {
				t.Errorf("share = first %d step %d capacity %d (%d taken), want %d %d %d (%d)",
					first, step, capacity, taken, tt.first, tt.step, tt.capacity, tt.want)
			}
		})
	}
}

// TestShareAddsUp: over every activator, each instance is admitted at most
// its concurrency (at least one slot each aside), and every instance is
// used.
func TestShareAddsUp(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for k := 1; k <= 7; k++ {
			for _, c := range []int{1, 2, 3, 7, 10} {
				admitted := make([]int, k)
				for self := range n {
					first, step, capacity := share(c, k, Peers{n, self})
					for j := range k {
						if j%step == first {
							admitted[j] += capacity
						}
					}
				}
				for j, a := range admitted {
					sharers := max(n/k, 1) + 1 // the most activators one instance can have
					if a == 0 || a > max(c, min(sharers, n)) {
						t.Errorf("n=%d k=%d c=%d: instance %d admitted %d", n, k, c, j, a)
					}
				}
			}
		}
	}
}
