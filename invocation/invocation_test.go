package invocation

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name       string
		size, adds int
		ask        int
		want       []int // statuses, newest first
	}{
		{"empty", 3, 0, 5, []int{}},
		{"partly filled", 3, 2, 5, []int{2, 1}},
		{"wrapped", 3, 5, 5, []int{5, 4, 3}},
		{"fewer asked", 3, 5, 2, []int{5, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewRing(tt.size)
			for i := 1; i <= tt.adds; i++ {
				g.Add(Record{Status: i})
			}
			got, total := g.Recent(tt.ask)
			if total != uint64(tt.adds) || len(got) != len(tt.want) {
				t.Fatalf("Recent = %v (total %d), want statuses %v", got, total, tt.want)
			}
			for i, r := range got {
				if r.Status != tt.want[i] {
					t.Fatalf("Recent = %v, want statuses %v", got, tt.want)
				}
			}
		})
	}
}

func TestRingConcurrentAdds(t *testing.T) {
	g := NewRing(100)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				g.Add(Record{Status: 200})
			}
		})
	}
	wg.Wait()
	got, total := g.Recent(1000)
	if total != 8000 || len(got) != 100 {
		t.Errorf("after 8000 adds: %d records, total %d; want 100 and 8000", len(got), total)
	}
}

func TestTruncateError(t *testing.T) {
	long := strings.Repeat("x", MaxErrorBytes-1) + "é" // é is 2 bytes: it straddles the bound
	tests := []struct {
		name, in, want string
	}{
		{"short", "boom", "boom"},
		{"at the bound", strings.Repeat("x", MaxErrorBytes), strings.Repeat("x", MaxErrorBytes)},
		{"over, on a rune boundary", long + "tail", strings.Repeat("x", MaxErrorBytes-1)},
	}
	for _, tt := range tests {
		if got := TruncateError(tt.in); got != tt.want || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, want %d", tt.name, len(got), len(tt.want))
		}
	}
}
