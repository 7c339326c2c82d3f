package estimate

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
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

// A class with MinClassResiduals of its own is calibrated by them (its P90
// at least every class's); a class with fewer, by every class's; one class
// alone changes nothing.
func TestQuantilesByClass(t *testing.T) {
	cases := map[string]struct {
		low, medium int // residuals of each class: LOW's log 3, MEDIUM's 0
		class       domain.Priority
		want90      float64
	}{
		"LOW with its own residuals":                   {low: MinClassResiduals, medium: 1000, class: domain.Low, want90: math.Log(3)},
		"LOW with too few: every class's":              {low: MinClassResiduals - 1, medium: 5000, class: domain.Low, want90: 0},
		"MEDIUM with its own, the pooled P90 above it": {low: MinClassResiduals, medium: 1000, class: domain.Medium, want90: math.Log(3)},
		"HIGH without any: every class's":              {low: 100, medium: 5000, class: domain.High, want90: 0},
		"one class: the same residuals":                {medium: 1000, class: domain.Medium, want90: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &Estimator{}
			e.res.max = 100000
			for i := range e.byClass {
				e.byClass[i].max = 100000
			}
			add := func(p domain.Priority, v float64, n int) {
				for range n {
					e.res.add(v)
					e.byClass[p].add(v)
				}
			}
			add(domain.Medium, 0, tc.medium)
			add(domain.Low, math.Log(3), tc.low)
			_, q90 := e.quantiles(tc.class)
			if math.Abs(q90-tc.want90) > 1e-9 {
				t.Errorf("P90 log-ratio %v, want %v", q90, tc.want90)
			}
		})
	}
}
