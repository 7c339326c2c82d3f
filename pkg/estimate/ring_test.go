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

// A class with MinClassResiduals of its own over the pooled window's span
// is calibrated by them (its P90 blended toward every class's when that
// one is higher); a class with fewer, by every class's; one class
// alone changes nothing; and the class's window follows the pooled one's
// span, down to its last MinClassResiduals.
func TestQuantilesByClass(t *testing.T) {
	type batch struct {
		class domain.Priority
		v     float64
		n     int
	}
	l3 := math.Log(3)
	cases := map[string]struct {
		window int
		adds   []batch // in this order
		class  domain.Priority
		want90 float64
	}{
		"LOW with its own residuals": {window: 100000, adds: []batch{{domain.Medium, 0, 1000}, {domain.Low, l3, MinClassResiduals}},
			class: domain.Low, want90: l3},
		"LOW with too few: every class's": {window: 100000, adds: []batch{{domain.Medium, 0, 5000}, {domain.Low, l3, MinClassResiduals - 1}},
			class: domain.Low, want90: 0},
		"MEDIUM with its own, the pooled P90 above it: blended by n/(n+ClassShrink)": {window: 100000,
			adds:  []batch{{domain.Medium, 0, ClassShrink}, {domain.Low, l3, MinClassResiduals}},
			class: domain.Medium, want90: 0.5 * l3},
		"LOW with its own above the pooled P90: its own": {window: 100000, adds: []batch{{domain.Medium, 0, 5000}, {domain.Low, l3, 1000}},
			class: domain.Low, want90: l3},
		"HIGH without any: every class's": {window: 100000, adds: []batch{{domain.Medium, 0, 5000}, {domain.Low, l3, 100}},
			class: domain.High, want90: 0},
		"one class: the same residuals": {window: 100000, adds: []batch{{domain.Medium, 0, 1000}}, class: domain.Medium, want90: 0},
		"the class's old residuals beyond the pooled span are dropped": {window: 1000,
			adds:  []batch{{domain.Low, l3, 600}, {domain.Medium, 0, 1000}, {domain.Low, 0, 300}},
			class: domain.Low, want90: 0},
		"a class rarer in the span keeps its last MinClassResiduals": {window: 1000,
			adds:  []batch{{domain.Low, 0, 600}, {domain.Low, l3, MinClassResiduals}, {domain.Medium, 0, 1000}},
			class: domain.Low, want90: l3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &Estimator{Window: tc.window}
			for _, b := range tc.adds {
				for range b.n {
					e.addResidual(b.v, b.class)
				}
			}
			_, q90 := e.quantiles(tc.class)
			if math.Abs(q90-tc.want90) > 1e-9 {
				t.Errorf("P90 log-ratio %v, want %v", q90, tc.want90)
			}
		})
	}
}

// The class windows hold, at every step, exactly each class's residuals
// among the pooled window's, or its last MinClassResiduals when fewer.
func TestPropClassWindows(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := rapid.IntRange(1, 600).Draw(t, "window")
		e := &Estimator{Window: w}
		type r struct {
			c domain.Priority
			v float64
		}
		var all []r
		steps := rapid.IntRange(1, 1500).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			c := domain.Priority(rapid.IntRange(int(domain.Low), int(domain.Critical)).Draw(t, "class"))
			v := float64(rapid.IntRange(-50, 50).Draw(t, "v")) / 10
			e.addResidual(v, c)
			all = append(all, r{c, v})
		}
		from := max(0, len(all)-w)
		for c := domain.Low; c <= domain.Critical; c++ {
			var in, own []float64
			for i, x := range all {
				if x.c == c {
					own = append(own, x.v)
					if i >= from {
						in = append(in, x.v)
					}
				}
			}
			want := own[max(0, len(own)-max(len(in), MinClassResiduals)):]
			want = slices.Clone(want)
			slices.Sort(want)
			if got := e.byClass[c].sorted; !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("class %s: window %v, want %v", c, got, want)
			}
		}
	})
}

// The P50 of a wait simulated in a bin moves from the class's P50 toward
// the median of the class's residuals of that bin by n/(n+WaitBinShrink);
// other bins, other classes and NoWaitBins keep the class's P50, and a
// bin keeps its last WaitBinWindow residuals.
func TestWaitBins(t *testing.T) {
	type batch struct {
		class domain.Priority
		raw   float64 // simulated wait, s
		v     float64
		n     int
	}
	l3 := math.Log(3)
	hour := 3600.0
	cases := map[string]struct {
		adds  []batch
		noBin bool
		class domain.Priority
		raw   float64
		q50   float64 // the class's P50 log-ratio
		want  float64
	}{
		"no residuals in the bin: the class's P50": {adds: []batch{{domain.Medium, 60, l3, 50}},
			class: domain.Medium, raw: hour, q50: 0.1, want: 0.1},
		"a full bin: its median, shrunk toward the class's P50": {adds: []batch{{domain.Medium, hour, l3, WaitBinWindow}},
			class: domain.Medium, raw: hour, q50: 0, want: l3 * WaitBinWindow / (WaitBinWindow + WaitBinShrink)},
		"WaitBinShrink residuals: halfway": {adds: []batch{{domain.Medium, hour, l3, WaitBinShrink}},
			class: domain.Medium, raw: hour, q50: 0, want: l3 / 2},
		"a size within the same bin (1.5 h and 2 h) shares it": {adds: []batch{{domain.Medium, 1.5 * hour, l3, WaitBinWindow}},
			class: domain.Medium, raw: 2 * hour, q50: 0, want: l3 * WaitBinWindow / (WaitBinWindow + WaitBinShrink)},
		"another class's residuals do not count": {adds: []batch{{domain.Low, hour, l3, WaitBinWindow}},
			class: domain.Medium, raw: hour, q50: 0.2, want: 0.2},
		"only the bin's last WaitBinWindow": {adds: []batch{{domain.High, hour, l3, WaitBinWindow}, {domain.High, hour, -l3, WaitBinWindow}},
			class: domain.High, raw: hour, q50: 0, want: -l3 * WaitBinWindow / (WaitBinWindow + WaitBinShrink)},
		"NoWaitBins: the class's P50": {adds: []batch{{domain.Medium, hour, l3, WaitBinWindow}}, noBin: true,
			class: domain.Medium, raw: hour, q50: 0.1, want: 0.1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &Estimator{NoWaitBins: tc.noBin}
			for _, b := range tc.adds {
				for range b.n {
					e.addWaitResidual(b.v, b.raw, b.class)
				}
			}
			if got := e.waitQuantile(tc.class, waitBin(tc.raw), tc.q50); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("P50 log-ratio %v, want %v", got, tc.want)
			}
			bins := e.waitQuantiles(tc.class, tc.q50)
			if tc.noBin != (bins == nil) {
				t.Fatalf("bins %v with NoWaitBins %v", bins, tc.noBin)
			}
			if bins != nil && math.Abs(bins[waitBin(tc.raw)]-tc.want) > 1e-9 {
				t.Errorf("bins' P50 log-ratio %v, want %v", bins[waitBin(tc.raw)], tc.want)
			}
		})
	}
}

// waitBin: one bin per factor of WaitBinFactor of the simulated wait plus
// calC, from 0.
func TestWaitBin(t *testing.T) {
	cases := map[string]struct {
		raw  float64
		want int
	}{
		"zero":                  {0, 0},
		"just below a factor":   {calC*(WaitBinFactor-1) - 1, 0},
		"a factor":              {calC * (WaitBinFactor - 1), 1},
		"a factor squared":      {calC * (WaitBinFactor*WaitBinFactor - 1), 2},
		"an hour":               {3600, 2},
		"an hour and a quarter": {4500, 3},
		"beyond the last bin":   {1e30, waitBins - 1},
		"negative (never met)":  {-100, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := waitBin(tc.raw); got != tc.want {
				t.Errorf("waitBin(%v) = %d, want %d", tc.raw, got, tc.want)
			}
		})
	}
}

// The P50's guard: a wait simulated beyond WaitGuard × the longest among
// the calibration window's residuals is not calibrated; within it, or
// with fewer than 20 residuals, it is.
func TestWaitGuard(t *testing.T) {
	cases := map[string]struct {
		raws []float64 // simulated waits of the residuals, in order
		raw  float64
		want float64 // the P50's log-ratio from 0.5
	}{
		"within the guard":                        {raws: repeat(1000, 30), raw: WaitGuard * 1000, want: 0.5},
		"beyond it: not calibrated":               {raws: repeat(1000, 30), raw: WaitGuard*1000 + 1, want: 0},
		"fewer than 20 residuals":                 {raws: repeat(1000, 19), raw: 1e9, want: 0.5},
		"the longest in the window":               {raws: append(repeat(1e6, 1), repeat(1000, 30)...), raw: 1e6, want: 0.5},
		"the longest left the window":             {raws: append(repeat(1e6, 1), repeat(1000, 50)...), raw: 1e6, want: 0},
		"every residual simulated at 0: no guard": {raws: repeat(0, 30), raw: 1, want: 0.5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := &Estimator{Window: 50}
			e.res.max = 50
			for _, r := range tc.raws {
				e.addResidual(0, domain.Medium)
				if e.resRaw.max == 0 {
					e.resRaw.max = e.res.max
				}
				e.resRaw.add(r)
			}
			if got := guarded(tc.raw, e.guardTop(), 0.5); got != tc.want {
				t.Errorf("P50 log-ratio %v, want %v (longest %v)", got, tc.want, e.guardTop())
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
