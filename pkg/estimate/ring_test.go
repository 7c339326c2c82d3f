package estimate

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestRingSorted: the incrementally sorted window always holds exactly
// the last max values, sorted, whatever the sequence of additions.
func TestRingSorted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.IntRange(1, 20).Draw(t, "size")
		vals := rapid.SliceOf(rapid.Float64Range(-5, 5)).Draw(t, "vals")
		r := ring{max: size}
		for i, v := range vals {
			r.add(v)
			want := slices.Clone(vals[max(0, i+1-size) : i+1])
			slices.Sort(want)
			if !slices.Equal(r.sorted, want) {
				t.Fatalf("after %d additions: sorted %v, want %v", i+1, r.sorted, want)
			}
		}
	})
}
