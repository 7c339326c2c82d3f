package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FormatSynthetic is the format name of a generated workload (Synthetic).
const FormatSynthetic = "synthetic"

// Synthetic is a generated workload shaped like a published trace, so
// that a simulation needs no trace file: `gpuq sim --workload
// synthetic:jobs=N,seed=S[,load=L,gpus=G,mix=philly|alibaba]`.
//
// Each job draws, from one PCG(Seed) stream, in this order: its GPU count
// (the trace's frequencies of each power of two), its run time (the
// trace's run-time quantiles of its group of GPU counts, interpolated
// log-linearly between the quantiles: a piecewise log-uniform
// distribution that reproduces the trace's 14 quantiles, 0 to 100 %,
// exactly), its VC (Philly's job share of each VC; none for alibaba) and
// its gap to the previous arrival (a Poisson process whose rate follows
// the trace's hour-of-day and day-of-week profile). The arrival rate is
// then scaled so that the generated jobs' GPU-seconds over the arrival
// window are Load × GPUs: the offered load Stats and `gpuq sim` report.
//
// A single log-normal per group would be the textbook choice; fitted to
// Philly (mean and standard deviation of ln run time) it puts the mean
// run time of 8-GPU jobs at 638,000 s against the trace's 110,234 s (and
// of 4-GPU jobs at 386,000 s against 72,543 s), because the trace's run
// times are bimodal (quick failures and long training runs) rather than
// log-normal. The quantile table keeps both modes and the tail, cut at
// the trace's longest job.
//
// The statistics (phillyShape, alibabaShape) are trace.Shapes of the
// published traces, measured by TestSyntheticShapesFromTraces, which
// fails when they and the traces disagree; no job of a trace is kept.
type Synthetic struct {
	Jobs int
	Seed uint64
	// Load is the offered load on GPUs: Σ GPUs × run time over GPUs × the
	// arrival window (first to last submission). Default
	// DefaultSyntheticLoad.
	Load float64
	// GPUs is the cluster the load is relative to; 0 until the caller
	// (gpuq sim: the smallest cluster of --nodes) fills it in.
	GPUs int
	// Mix names the trace whose statistics are drawn from: "philly"
	// (default) or "alibaba".
	Mix string
}

// DefaultSyntheticLoad is the standard scenario's offered load: Philly's
// 68,503 jobs pooled on 72 × 8 GPUs (docs/performance.md).
const DefaultSyntheticLoad = 0.82

// Mixes of a synthetic workload.
const (
	MixPhilly  = "philly"
	MixAlibaba = "alibaba"
)

// ParseSynthetic reads "synthetic:jobs=N,seed=S[,load=L,gpus=G,mix=M]".
// jobs is required (1 to 10,000,000); seed defaults to 1, load to
// DefaultSyntheticLoad, mix to philly; gpus to 0 (the caller's cluster).
func ParseSynthetic(spec string) (Synthetic, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(spec), ":")
	if kind != FormatSynthetic {
		return Synthetic{}, fmt.Errorf("%q: want synthetic:jobs=N,seed=S[,load=L,gpus=G,mix=philly|alibaba]", spec)
	}
	s := Synthetic{Seed: 1, Load: DefaultSyntheticLoad, Mix: MixPhilly}
	seen := map[string]bool{}
	for _, part := range strings.Split(rest, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return Synthetic{}, fmt.Errorf("%q: want key=value", part)
		}
		if seen[k] {
			return Synthetic{}, fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "jobs":
			s.Jobs, err = strconv.Atoi(v)
			if err != nil || s.Jobs < 1 || s.Jobs > 10_000_000 {
				return Synthetic{}, fmt.Errorf("jobs must be an integer from 1 to 10000000 (got %q)", v)
			}
		case "seed":
			if s.Seed, err = strconv.ParseUint(v, 10, 64); err != nil {
				return Synthetic{}, fmt.Errorf("seed must be a non-negative integer (got %q)", v)
			}
		case "load":
			s.Load, err = strconv.ParseFloat(v, 64)
			if err != nil || !(s.Load > 0 && s.Load <= 100) {
				return Synthetic{}, fmt.Errorf("load must be a number above 0 and at most 100 (got %q)", v)
			}
		case "gpus":
			s.GPUs, err = strconv.Atoi(v)
			if err != nil || s.GPUs < 1 {
				return Synthetic{}, fmt.Errorf("gpus must be an integer ≥ 1 (got %q)", v)
			}
		case "mix":
			if v != MixPhilly && v != MixAlibaba {
				return Synthetic{}, fmt.Errorf("mix must be %s or %s (got %q)", MixPhilly, MixAlibaba, v)
			}
			s.Mix = v
		default:
			return Synthetic{}, fmt.Errorf("unknown key %q (want jobs, seed, load, gpus, mix)", k)
		}
	}
	if s.Jobs == 0 {
		return Synthetic{}, fmt.Errorf("jobs is required (e.g. synthetic:jobs=2000,seed=1)")
	}
	return s, nil
}

// String is the canonical form ParseSynthetic reads back.
func (s Synthetic) String() string {
	out := fmt.Sprintf("synthetic:jobs=%d,seed=%d,load=%s", s.Jobs, s.Seed, strconv.FormatFloat(s.Load, 'g', -1, 64))
	if s.GPUs > 0 {
		out += fmt.Sprintf(",gpus=%d", s.GPUs)
	}
	return out + ",mix=" + s.Mix
}

// HasVCs reports whether the workload's jobs carry VCs (teams).
func (s Synthetic) HasVCs() bool { return len(s.shape().vcs) > 0 }

// SyntheticVCs are the node counts of the VCs a philly-mix workload's
// jobs belong to: Philly's vcs.csv (HeliosArtifact philly_vc.csv), the
// guarantees of `gpuq sim --teams vc`.
func SyntheticVCs() map[string]int {
	return map[string]int{"6214e9": 64, "7f04ca": 32, "11cb48": 16, "b436b2": 64, "ee9e8c": 64, "e13805": 16,
		"6c71a0": 32, "2869ce": 16, "ed69ec": 8, "103959": 8, "0e4a51": 32}
}

// syntheticEpoch is where generated arrivals start: a Sunday, 00:00 UTC
// (index 0 of Shape.Weekday).
var syntheticEpoch = time.Date(2023, 12, 31, 0, 0, 0, 0, time.UTC)

// shape is a trace's statistics as the generator reads them.
type shape struct {
	gpus      map[int]int       // jobs per power-of-two GPU count
	maxGroup  int               // run-time groups: GPU counts up to this, larger ones with it
	durations map[int][]float64 // run-time quantiles (s) at DurationQuantiles, per group
	hour      [24]float64       // arrival rate by hour of day, mean 1
	weekday   [7]float64        // arrival rate by weekday (0: Sunday), mean 1
	vcs       map[string]int    // jobs per VC
}

// phillyShape is trace.Shapes(Philly jobs-2017-10-11.csv, 16): 68,503
// jobs, Oct 1 – Nov 30 2017.
//
//   - GPU counts: 1 GPU 64,073 jobs (93.5 %), 2: 1,409 (2.1 %), 4: 1,534
//     (2.2 %), 8: 1,301 (1.9 %), 16: 146 (0.2 %, of which 7 of 12 GPUs),
//     32: 40 (0.06 %, of which 6 of 24 GPUs).
//   - Run times (s) at 0, 5, 10, 20, …, 90, 95, 99, 100 %: 1-GPU median
//     1,398 (23 min), p99 116,035 (32 h); 2-GPU median 20 (quick
//     failures), p90 101,628; 4-GPU median 16,265 (4.5 h); 8-GPU median
//     21,976 (6.1 h), p99 928,157 (10.7 d); 16 and 32 GPUs (186 jobs, one
//     group) median 48,179 (13.4 h). Longest: 2,750,674 s (31.8 d).
//   - Arrivals by hour of submit_time (as published): from 0.49 × the
//     mean rate at 14:00 to 2.18 × at 07:00; by weekday from 0.56 × on
//     Sundays to 1.44 × on Fridays.
//   - VCs: the 11 of vcs.csv, 6214e9 with 33,950 jobs (49.6 %) the
//     largest, e13805 with 264 the smallest.
var phillyShape = shape{
	gpus:     map[int]int{1: 64073, 2: 1409, 4: 1534, 8: 1301, 16: 146, 32: 40},
	maxGroup: 16,
	durations: map[int][]float64{
		1:  {1, 55, 64, 92, 391, 832, 1398, 1942, 2560, 4031, 8805, 17573, 116035, 2597076},
		2:  {2, 8, 11, 14, 16, 18, 20, 23, 32, 672, 101628, 224505, 597608, 2582803},
		4:  {9, 81, 132, 319, 1028, 6223, 16265, 35049, 72692, 99682, 179779, 238657, 747114, 2750674},
		8:  {17, 88, 193, 553, 3395, 11196, 21976, 54928, 129031, 186877, 285391, 428034, 928157, 2214025},
		16: {20, 55, 120, 340, 608, 19009, 48179, 58030, 96152, 159985, 240730, 340881, 1369876, 1710643},
	},
	hour: [24]float64{1.36, 1.01, 1.20, 1.11, 0.53, 1.14, 1.83, 2.18, 1.12, 0.95, 0.88, 0.75,
		0.64, 0.64, 0.49, 0.59, 0.94, 0.69, 0.83, 0.69, 1.13, 0.95, 1.25, 1.09},
	weekday: [7]float64{0.56, 0.84, 1.01, 1.14, 1.32, 1.44, 0.69},
	vcs: map[string]int{"0e4a51": 1269, "103959": 1450, "11cb48": 11897, "2869ce": 315, "6214e9": 33950, "6c71a0": 9383,
		"7f04ca": 604, "b436b2": 7222, "e13805": 264, "ed69ec": 1096, "ee9e8c": 1053},
}

// alibabaShape is trace.Shapes(Alibaba openb pods.csv, 1): 6,203 GPU pods
// over 149 days.
//
//   - GPU counts: 1 GPU 6,129 pods (98.8 %; fractional shares count as
//     one GPU), 2: 15, 4: 15, 8: 44 (0.7 %).
//   - Run times (s), one group (too few multi-GPU pods to split): median
//     655 (11 min), p90 7,389 (2 h), p99 147,608 (41 h), longest
//     12,537,496 (145 d: pods that ran through the trace).
//   - Arrivals by hour from the trace's origin (its clock is relative):
//     from 0.44 × the mean rate to 1.63 ×; by day of the origin's week
//     from 0.53 × to 1.30 ×.
//   - No VCs.
var alibabaShape = shape{
	gpus:     map[int]int{1: 6129, 2: 15, 4: 15, 8: 44},
	maxGroup: 1,
	durations: map[int][]float64{
		1: {4, 48, 67, 143, 218, 368, 655, 1037, 1695, 3302, 7389, 16994, 147608, 12537496},
	},
	hour: [24]float64{1.38, 1.30, 0.98, 1.33, 1.29, 1.00, 0.90, 0.91, 0.72, 0.44, 0.75, 0.68,
		0.51, 0.47, 0.44, 0.61, 0.91, 1.24, 1.63, 1.41, 1.07, 1.28, 1.19, 1.55},
	weekday: [7]float64{1.11, 1.30, 0.53, 0.79, 1.27, 0.94, 1.06},
}

func (s Synthetic) shape() *shape {
	if s.Mix == MixAlibaba {
		return &alibabaShape
	}
	return &phillyShape
}

// Generate draws the workload: Jobs jobs sorted by Submit, IDs
// "syn-NNNNNNN", the first submitted at offset 0, SubmitTime from a
// Sunday 00:00 UTC (2023-12-31) so that the hours and weekdays are the
// profile's. Same Synthetic, same jobs. GPUs must be set (> 0).
func (s Synthetic) Generate() ([]Job, error) {
	if s.Jobs < 1 {
		return nil, fmt.Errorf("synthetic: jobs must be ≥ 1")
	}
	if s.GPUs < 1 {
		return nil, fmt.Errorf("synthetic: gpus (the cluster the load is relative to) must be ≥ 1")
	}
	if !(s.Load > 0) {
		return nil, fmt.Errorf("synthetic: load must be > 0")
	}
	sh := s.shape()
	counts := sortedIntKeys(sh.gpus)
	vcs := make([]string, 0, len(sh.vcs))
	for vc := range sh.vcs {
		vcs = append(vcs, vc)
	}
	slices.Sort(vcs)
	gpuCum := cumulative(len(counts), func(i int) float64 { return float64(sh.gpus[counts[i]]) })
	vcCum := cumulative(len(vcs), func(i int) float64 { return float64(sh.vcs[vcs[i]]) })

	// 1. Draw each job's size, run time, VC and gap (in expected arrivals).
	r := rand.New(rand.NewPCG(s.Seed, 0x5e7e71c))
	jobs := make([]Job, s.Jobs)
	gaps := make([]float64, s.Jobs)
	gpuSeconds := 0.0
	for i := range jobs {
		g := counts[pick(gpuCum, r.Float64())]
		d := quantileDraw(sh.durations[min(g, sh.maxGroup)], r.Float64())
		vc := ""
		if u := r.Float64(); len(vcs) > 0 {
			vc = vcs[pick(vcCum, u)]
		}
		gaps[i] = r.ExpFloat64()
		jobs[i] = Job{ID: fmt.Sprintf("syn-%07d", i+1), VC: vc, GPUs: g, GPUMilli: 1000, Duration: time.Duration(d) * time.Second}
		gpuSeconds += float64(g) * float64(d)
	}
	// 2. Arrivals: expected arrivals a_i = Σ gaps; the i-th job arrives at
	//    the time the profile's cumulative rate × rate0 reaches a_i. The
	//    window from the first to the last arrival must be
	//    gpuSeconds / (Load × GPUs): find rate0 by bisection (the window
	//    shrinks as the rate grows).
	cum := newProfile(sh)
	acc := make([]float64, len(gaps))
	sum := 0.0
	for i, g := range gaps {
		sum += g
		acc[i] = sum
	}
	want := gpuSeconds / (s.Load * float64(s.GPUs)) / 3600 // hours
	window := func(rate float64) float64 { return cum.at(acc[len(acc)-1]/rate) - cum.at(acc[0]/rate) }
	lo, hi := 1e-12, 1e12 // arrivals per hour
	for range 200 {
		mid := math.Sqrt(lo * hi)
		if window(mid) > want {
			lo = mid
		} else {
			hi = mid
		}
	}
	rate := math.Sqrt(lo * hi)
	first := time.Duration(math.Round(cum.at(acc[0]/rate)*3600)) * time.Second
	for i := range jobs {
		at := time.Duration(math.Round(cum.at(acc[i]/rate)*3600)) * time.Second
		jobs[i].Submit = at - first
		jobs[i].SubmitTime = syntheticEpoch.Add(at)
	}
	return jobs, nil
}

// profile is the inverse of the cumulative arrival rate over a week, by
// hour: week[h] is the expected arrivals (at rate 1 on average) from
// Sunday 00:00 to hour h.
type profile struct{ week [169]float64 }

func newProfile(sh *shape) *profile {
	p := &profile{}
	mean := 0.0
	for h := range 168 {
		mean += sh.hour[h%24] * sh.weekday[h/24]
	}
	mean /= 168
	for h := range 168 {
		p.week[h+1] = p.week[h] + sh.hour[h%24]*sh.weekday[h/24]/mean
	}
	return p
}

// at is the time (hours from the epoch) by which x arrivals are expected.
func (p *profile) at(x float64) float64 {
	weeks := math.Floor(x / p.week[168])
	rest := x - weeks*p.week[168]
	h := max(0, min(167, sort168(p.week[:], rest)))
	frac := 0.0
	if w := p.week[h+1] - p.week[h]; w > 0 {
		frac = (rest - p.week[h]) / w
	}
	return weeks*168 + float64(h) + math.Max(0, math.Min(1, frac))
}

// sort168 is the hour h with week[h] ≤ x < week[h+1].
func sort168(week []float64, x float64) int {
	i, _ := slices.BinarySearch(week, x)
	if i < len(week) && week[i] == x {
		return i
	}
	return i - 1
}

// quantileDraw is the run time (whole seconds, ≥ 1) at quantile u of the
// piecewise log-uniform distribution through qs (at DurationQuantiles).
func quantileDraw(qs []float64, u float64) float64 {
	ps := DurationQuantiles
	i := 0
	for i+2 < len(ps) && u >= ps[i+1] {
		i++
	}
	lo, hi := math.Log(math.Max(qs[i], 1)), math.Log(math.Max(qs[i+1], 1))
	f := (u - ps[i]) / (ps[i+1] - ps[i])
	return math.Max(1, math.Round(math.Exp(lo+f*(hi-lo))))
}

func cumulative(n int, w func(int) float64) []float64 {
	out := make([]float64, n)
	sum := 0.0
	for i := range n {
		sum += w(i)
		out[i] = sum
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// pick is the first index whose cumulative share exceeds u.
func pick(cum []float64, u float64) int {
	for i, c := range cum {
		if u < c {
			return i
		}
	}
	return len(cum) - 1
}

func sortedIntKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// DurationQuantiles are the quantiles Shape gives of each group's run
// times: the shortest, every tenth with the 5th, 95th and 99th
// percentiles, and the longest.
var DurationQuantiles = []float64{0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1}
