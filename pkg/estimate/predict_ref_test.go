package estimate

import (
	"math"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"pgregory.net/rapid"
)

// The predictor's quantile function as it was before ratioFn (a closure
// resolving the groups per call): the reference TestRatioFnExact holds
// the new one to, bit for bit.

func (p *Predictor) refRatioOf(t *domain.Task) func(q float64) float64 {
	if p.global.n() == 0 {
		return refPriorLogRatio
	}
	var groups [2]*ring
	n := 0
	for _, r := range []*ring{p.team[t.Team], p.prefix[Prefix(t.Name)]} {
		if r != nil && r.n() > 0 {
			groups[n] = r
			n++
		}
	}
	learned := func(q float64) float64 {
		g := p.global.quantile(q)
		if n == 0 {
			return g
		}
		v := 0.0
		for _, r := range groups[:n] {
			w := float64(r.n()) / float64(r.n()+Shrink)
			v += w*r.quantile(q) + (1-w)*g
		}
		return v / float64(n)
	}
	// The prior's weight: PriorRuns against the runs learned.
	wl := float64(p.global.n()) / float64(float64(p.global.n())+max(p.PriorRuns, 0))
	return func(q float64) float64 {
		if wl == 1 {
			return learned(q)
		}
		return wl*learned(q) + (1-wl)*refPriorLogRatio(q)
	}
}

// refPriorLogRatio is priorLogRatio as it was written, its factor computed
// in the expression.
func refPriorLogRatio(q float64) float64 {
	return math.Log(3) / 1.2816 * normQuantile(q)
}

func refCdf(ratio func(float64) float64, x float64) float64 {
	lo, hi := 0.0, 1.0
	for i := 0; i < 20; i++ {
		mid := (lo + hi) / 2
		if ratio(mid) < x {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

func (p *Predictor) refTotal(t *domain.Task, q float64) time.Duration {
	est := t.Hours * 3600
	if est <= 0 {
		est = 4 * 3600
	}
	if p.Exact {
		return seconds(est)
	}
	return seconds(est * math.Exp(p.refRatioOf(t)(q)))
}

func (p *Predictor) refLeftToRun(t *domain.Task, q float64) time.Duration {
	return max(p.refTotal(t, q)-time.Duration(t.RunSeconds*float64(time.Second)), 5*time.Second)
}

func (p *Predictor) refRemaining(t *domain.Task, elapsed time.Duration, q float64) time.Duration {
	done := t.RunSeconds + elapsed.Seconds()
	est := t.Hours * 3600
	if est <= 0 {
		est = 4 * 3600
	}
	if done <= 0 {
		return p.refTotal(t, q)
	}
	if p.Exact {
		return seconds(math.Max(est-done, 5))
	}
	x := math.Log(done / est)
	ratio := p.refRatioOf(t)
	u := refCdf(ratio, x)
	qq := u + q*(1-u)
	if qq > 0.995 {
		qq = 0.995
	}
	rem := est*math.Exp(ratio(qq)) - done
	if min := math.Max(5, 0.1*elapsed.Seconds()); rem < min {
		rem = min
	}
	return seconds(rem)
}

var (
	refTeams = []string{"a", "b", "c", "vc-x"}
	refNames = []string{"resnet50-lr3e-4", "ResNet-2", "bert_base", "bert.large", "gpt 2", "x", "job7", "application_1506_10", ""}
)

func drawTask(t *rapid.T, label string) *domain.Task {
	return &domain.Task{
		Team:       rapid.SampledFrom(refTeams).Draw(t, label+".team"),
		Name:       rapid.SampledFrom(refNames).Draw(t, label+".name"),
		Hours:      rapid.OneOf(rapid.Just(0.0), rapid.Float64Range(-1, 0), rapid.Float64Range(0.001, 200)).Draw(t, label+".hours"),
		RunSeconds: rapid.OneOf(rapid.Just(0.0), rapid.Float64Range(0.01, 1e6)).Draw(t, label+".ran"),
	}
}

// TestRatioFnExact: Remaining, Total and LeftToRun (and the quantile
// function and its inverse under them) give, bit for bit, what the
// closure-based implementation gave, on random predictors and tasks, and
// on the predictors' snapshots.
func TestRatioFnExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := NewPredictor(rapid.IntRange(4, 60).Draw(t, "window"))
		p.Exact = rapid.IntRange(0, 9).Draw(t, "exact") == 0
		p.PriorRuns = rapid.SampledFrom([]float64{0, 1, DefaultPriorRuns, 500}).Draw(t, "prior")
		for range rapid.IntRange(0, 120).Draw(t, "observed") {
			p.Observe(drawTask(t, "obs"))
		}
		preds := []*Predictor{p, p.Snapshot()}
		for range rapid.IntRange(1, 20).Draw(t, "queries") {
			task := drawTask(t, "q")
			q := rapid.OneOf(rapid.Just(0.5), rapid.Just(0.0), rapid.Just(1.0), rapid.Float64Range(0, 1)).Draw(t, "quantile")
			el := time.Duration(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(-1e12, 1e16)).Draw(t, "elapsed"))
			x := rapid.Float64Range(-8, 8).Draw(t, "x")
			for _, p := range preds {
				var f ratioFn
				p.ratioOf(task, &f)
				ref := p.refRatioOf(task)
				if a, b := f.at(q), ref(q); math.Float64bits(a) != math.Float64bits(b) {
					t.Fatalf("quantile %v: %v, want %v", q, a, b)
				}
				if a, b := f.cdf(x), refCdf(ref, x); math.Float64bits(a) != math.Float64bits(b) {
					t.Fatalf("cdf %v: %v, want %v", x, a, b)
				}
				if a, b := p.Remaining(task, el, q), p.refRemaining(task, el, q); a != b {
					t.Fatalf("Remaining(%+v, %v, %v) = %v, want %v", task, el, q, a, b)
				}
				if a, b := p.Total(task, q), p.refTotal(task, q); a != b {
					t.Fatalf("Total(%+v, %v) = %v, want %v", task, q, a, b)
				}
				if a, b := p.LeftToRun(task, q), p.refLeftToRun(task, q); a != b {
					t.Fatalf("LeftToRun(%+v, %v) = %v, want %v", task, q, a, b)
				}
			}
		}
	})
}
