// Stats and Shapes measure a trace; the tests check the synthetic
// workloads' figures (synthetic.go) against the published traces with them.
package trace

import (
	"math"
	"slices"
	"time"
)

// Summary describes a job list against a cluster of TotalGPUs GPUs.
type Summary struct {
	Jobs      int
	TotalGPUs int
	// First and Last are the earliest and latest Submit; Span = Last − First,
	// the arrival window.
	First, Last, Span time.Duration
	// GPUHours is Σ GPUs × Duration, in hours (whole GPUs: openb
	// fractional shares count as whole GPUs, as a whole-GPU scheduler
	// would have to allocate them).
	GPUHours float64
	// OfferedLoad is the GPU-seconds demanded over the GPU-seconds the
	// cluster offers during the arrival window:
	// Σ GPUs × Duration / (TotalGPUs × Span). 0 when TotalGPUs ≤ 0 or
	// Span is 0. Above 1 the queue cannot keep up on average.
	OfferedLoad float64
	// MedianDuration and P99Duration are nearest-rank percentiles of
	// Duration; MaxGPUs is the largest request.
	MedianDuration, P99Duration time.Duration
	MaxGPUs                     int
}

// Stats summarises jobs against totalGPUs GPUs. jobs need not be sorted.
func Stats(jobs []Job, totalGPUs int) Summary {
	s := Summary{Jobs: len(jobs), TotalGPUs: totalGPUs}
	if len(jobs) == 0 {
		return s
	}
	s.First, s.Last = jobs[0].Submit, jobs[0].Submit
	var gpuSeconds float64
	durs := make([]time.Duration, len(jobs))
	for i, j := range jobs {
		s.First = min(s.First, j.Submit)
		s.Last = max(s.Last, j.Submit)
		s.MaxGPUs = max(s.MaxGPUs, j.GPUs)
		gpuSeconds += float64(j.GPUs) * j.Duration.Seconds()
		durs[i] = j.Duration
	}
	s.Span = s.Last - s.First
	s.GPUHours = gpuSeconds / 3600
	if totalGPUs > 0 && s.Span > 0 {
		s.OfferedLoad = gpuSeconds / (float64(totalGPUs) * s.Span.Seconds())
	}
	slices.Sort(durs)
	s.MedianDuration = nearestRank(durs, 0.5)
	s.P99Duration = nearestRank(durs, 0.99)
	return s
}

// nearestRank is the p-th percentile of sorted, non-empty xs.
func nearestRank(xs []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// Shape is what a synthetic workload needs of a trace: its summary
// statistics, never its jobs.
type Shape struct {
	Jobs int
	// GPUs counts the jobs by GPU count, rounded up to a power of two
	// (Philly's 12- and 24-GPU jobs count at 16 and 32).
	GPUs map[int]int
	// Durations are the run-time quantiles (at DurationQuantiles,
	// nearest-rank, whole seconds) of each group of jobs: a group is a
	// rounded GPU count up to the maxGroup given to Shapes, which holds
	// every larger job too.
	Durations map[int][]time.Duration
	// Hour and Weekday are the arrival rate by hour of day and by day of
	// the week (index 0: Sunday), each relative to its mean (mean 1).
	// Hours and days are those of SubmitTime where the trace has one
	// (Philly, as published); from the trace's origin otherwise (openb:
	// index 0 is the origin's day). A weekday's rate is its arrivals over
	// the number of such days in the arrival window.
	Hour    [24]float64
	Weekday [7]float64
	// VCs counts the jobs by VC (none for openb).
	VCs map[string]int
}

// Pow2 is the least power of two ≥ n (1 for n ≤ 1).
func Pow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// Shapes measures jobs (sorted by Submit, as the readers return them).
func Shapes(jobs []Job, maxGroup int) Shape {
	s := Shape{Jobs: len(jobs), GPUs: map[int]int{}, Durations: map[int][]time.Duration{}, VCs: map[string]int{}}
	if len(jobs) == 0 {
		return s
	}
	groups := map[int][]time.Duration{}
	var hours [24]float64
	var days [7]float64
	clock := func(j Job) time.Time {
		if !j.SubmitTime.IsZero() {
			return j.SubmitTime
		}
		// Day 0 of the origin's week is index 0 (Sunday): 1970-01-04.
		return time.Date(1970, 1, 4, 0, 0, 0, 0, time.UTC).Add(j.Submit)
	}
	for _, j := range jobs {
		g := Pow2(j.GPUs)
		s.GPUs[g]++
		k := min(g, maxGroup)
		groups[k] = append(groups[k], j.Duration.Round(time.Second))
		c := clock(j)
		hours[c.Hour()]++
		days[c.Weekday()]++
		if j.VC != "" {
			s.VCs[j.VC]++
		}
	}
	for k, ds := range groups {
		slices.Sort(ds)
		q := make([]time.Duration, len(DurationQuantiles))
		for i, p := range DurationQuantiles {
			q[i] = nearestRank(ds, p)
		}
		s.Durations[k] = q
	}
	// Days of each weekday in the arrival window, first to last day.
	first, last := clock(jobs[0]), clock(jobs[len(jobs)-1])
	var count [7]float64
	for d := time.Date(first.Year(), first.Month(), first.Day(), 0, 0, 0, 0, time.UTC); !d.After(last); d = d.AddDate(0, 0, 1) {
		count[d.Weekday()]++
	}
	sum := 0.0
	for i := range days {
		if count[i] > 0 {
			days[i] /= count[i]
		}
		sum += days[i]
	}
	for i := range days {
		s.Weekday[i] = days[i] / (sum / 7)
	}
	for i := range hours {
		s.Hour[i] = hours[i] / (float64(len(jobs)) / 24)
	}
	return s
}
