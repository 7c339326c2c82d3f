package estimate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"pgregory.net/rapid"
)

// TestBisectTable: every entry of the bisection's table is normQuantile at
// the point cdf's bisection tries at that node, found by walking the
// bisection to it (the path to node j is j's bits after the leading one:
// 0 below, 1 above).
func TestBisectTable(t *testing.T) {
	tab := bisectTable()
	if len(tab) != 1<<bisectTabDepth || bisectTabDepth > cdfSteps {
		t.Fatalf("table of %d for depth %d", len(tab), bisectTabDepth)
	}
	for j := 1; j < len(tab); j++ {
		depth := 0
		for j>>(depth+1) > 0 {
			depth++
		}
		lo, hi := 0.0, 1.0
		for b := depth - 1; b >= 0; b-- {
			mid := (lo + hi) / 2
			if j>>b&1 == 1 {
				lo = mid
			} else {
				hi = mid
			}
		}
		if want := normQuantile((lo + hi) / 2); math.Float64bits(tab[j]) != math.Float64bits(want) {
			t.Fatalf("node %d: %v, want %v", j, tab[j], want)
		}
	}
}

// refProgressPrior is progressPrior as it was written.
func refProgressPrior(q float64) float64 {
	return math.Log(1.5) / 1.2816 * normQuantile(q)
}

// refAt is ratioFn.at as it was written (the priors' factors computed in
// the expression), for any ratioFn, the progress's included.
func (f *ratioFn) refAt(q float64) float64 {
	if f.prog {
		if f.prior {
			return refProgressPrior(q)
		}
		return f.wl*f.learned(q) + f.wp*refProgressPrior(q)
	}
	if f.prior {
		return refPriorLogRatio(q)
	}
	v := f.learned(q)
	if f.wp == 0 {
		return v
	}
	return f.wl*v + f.wp*refPriorLogRatio(q)
}

// TestCdfTableExact: cdf with the table gives, bit for bit, the plain
// bisection on at, for random quantile functions of both kinds (the
// run-time ratio's and the progress error's), with and without history.
func TestCdfTableExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var f ratioFn
		f.prog = rapid.Bool().Draw(t, "prog")
		f.prior = rapid.IntRange(0, 4).Draw(t, "prior") == 0
		sorted := func(label string) []float64 {
			v := rapid.SliceOfN(rapid.Float64Range(-6, 6), 1, 40).Draw(t, label)
			s := append([]float64(nil), v...)
			for i := 1; i < len(s); i++ { // insertion sort
				for k := i; k > 0 && s[k] < s[k-1]; k-- {
					s[k], s[k-1] = s[k-1], s[k]
				}
			}
			return s
		}
		if !f.prior {
			f.global = sorted("global")
			n := rapid.IntRange(1, 3000).Draw(t, "n")
			f.wl = float64(n) / (float64(n) + rapid.SampledFrom([]float64{0, 1, 20, 50, 500}).Draw(t, "pseudo"))
			f.wp = 1 - f.wl
			f.n = rapid.IntRange(0, 2).Draw(t, "groups")
			for i := 0; i < f.n; i++ {
				f.groups[i] = sorted("group")
				gn := rapid.IntRange(1, 500).Draw(t, "gn")
				f.w[i] = float64(gn) / float64(gn+Shrink)
				f.w1[i] = 1 - f.w[i]
			}
		}
		for range rapid.IntRange(1, 10).Draw(t, "queries") {
			x := rapid.OneOf(rapid.Float64Range(-8, 8), rapid.Float64Range(-0.01, 0.01), rapid.SampledFrom([]float64{0, -4, 4, math.Inf(1), math.Inf(-1), math.NaN()})).Draw(t, "x")
			if a, b := f.cdf(x), refCdf(f.refAt, x); math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("cdf(%v) = %v, want %v (%+v)", x, a, b, f)
			}
		}
	})
}

// BenchmarkCdf: the bisection of a learned quantile function with two
// groups, over x spread across the distribution and its tails.
func BenchmarkCdf(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var f ratioFn
	mk := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = r.NormFloat64()
		}
		for i := 1; i < len(s); i++ {
			for k := i; k > 0 && s[k] < s[k-1]; k-- {
				s[k], s[k-1] = s[k-1], s[k]
			}
		}
		return s
	}
	f.global = mk(2000)
	f.wl = 2000.0 / 2050
	f.wp = 1 - f.wl
	f.n = 2
	for i := range 2 {
		f.groups[i] = mk(500)
		f.w[i] = 500.0 / 520
		f.w1[i] = 1 - f.w[i]
	}
	xs := make([]float64, 1024)
	for i := range xs {
		xs[i] = r.NormFloat64() * 1.5
	}
	b.ResetTimer()
	s := 0.0
	for i := 0; i < b.N; i++ {
		s += f.cdf(xs[i%len(xs)])
	}
	_ = s
}

// noMemo is p without its memo: every bisection computes (the path
// TestRatioFnExact and TestCdfTableExact hold to the reference).
func noMemo(p *Predictor) *Predictor {
	c := *p
	c.memo, c.snap = nil, nil
	return &c
}

// drawProgressTask is a task with a team and a name, and maybe a
// progress report: completed (for Observe) or running (for Remaining).
func drawProgressTask(t *rapid.T, label string, completed bool) *domain.Task {
	task := drawTask(t, label)
	start := memoT0.Add(time.Duration(rapid.Int64Range(0, 1e13).Draw(t, label+".start")))
	task.StartedAt, task.DispatchedAt = start, start
	task.State = domain.Running
	if rapid.Bool().Draw(t, label+".progress") {
		task.ProgressAt = start.Add(time.Duration(rapid.Int64Range(0, 1e13).Draw(t, label+".at")))
		task.ProgressFraction = rapid.Float64Range(0, 1.2).Draw(t, label+".fraction")
	}
	if completed {
		task.State = domain.Completed
		task.EndedAt = start.Add(time.Duration(task.RunSeconds * float64(time.Second)))
	}
	return task
}

// TestCdfMemoExact: with the bisection's memo (shared by a predictor and
// its snapshots, across changes of what they learned), Remaining gives bit
// for bit what it gives without it, on the predictor and on snapshots
// taken at any point, stale ones included, progress reports included.
func TestCdfMemoExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := NewPredictor(rapid.IntRange(4, 60).Draw(t, "window"))
		p.PriorRuns = rapid.SampledFrom([]float64{0, 1, DefaultPriorRuns}).Draw(t, "prior")
		preds := []*Predictor{p}
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				p.Observe(drawProgressTask(t, "obs", true))
			case 1:
				preds = append(preds, p.Snapshot())
			default:
				q := rapid.SampledFrom(preds).Draw(t, "pred")
				if rapid.IntRange(0, 20).Draw(t, "priorchange") == 0 {
					q.PriorRuns = rapid.SampledFrom([]float64{0, 1, DefaultPriorRuns}).Draw(t, "prior2")
				}
				task := drawProgressTask(t, "q", false)
				now := task.StartedAt.Add(time.Duration(rapid.Int64Range(0, 1e13).Draw(t, "el")))
				el := now.Sub(task.StartedAt)
				qq := rapid.SampledFrom([]float64{0.5, 0.9, 0.1}).Draw(t, "quantile")
				if a, b := q.Remaining(task, el, qq), noMemo(q).Remaining(task, el, qq); a != b {
					t.Fatalf("Remaining(%+v, %v, %v) = %v, want %v", task, el, qq, a, b)
				}
				if a, b := q.PolicyRun(task, now), noMemo(q).PolicyRun(task, now); a != b {
					t.Fatalf("PolicyRun(%+v, %v) = %v, want %v", task, now, a, b)
				}
			}
		}
	})
}

var memoT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
