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
