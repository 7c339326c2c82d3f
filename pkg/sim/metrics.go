package sim

import (
	"math"
	"slices"
	"time"
)

// outcome is what one policy's run produced, per task (by index).
type outcome struct {
	start, end     []time.Duration // first start, end; -1 = never
	busyGPUSeconds float64
	preemptions    int
	lostGPUSeconds float64
	backfilled     int
	queueLen       series
}

func newOutcome(n int) *outcome {
	o := &outcome{start: make([]time.Duration, n), end: make([]time.Duration, n)}
	for i := range o.start {
		o.start[i], o.end[i] = -1, -1
	}
	return o
}

// Point is a step of a series: from At on, the value is N.
type Point struct {
	At time.Duration
	N  int
}

// series keeps a step function, one point per change.
type series []Point

func (s *series) add(at time.Duration, n int) {
	if k := len(*s); k > 0 && (*s)[k-1].N == n {
		return
	}
	if k := len(*s); k > 0 && (*s)[k-1].At == at {
		(*s)[k-1].N = n
		return
	}
	*s = append(*s, Point{at, n})
}

// Metrics are one policy's numbers. Times are seconds.
type Metrics struct {
	AvgJCT       float64 `json:"avg_jct_s"`
	MedianJCT    float64 `json:"median_jct_s"`
	P95JCT       float64 `json:"p95_jct_s"`
	AvgQueue     float64 `json:"avg_queue_s"`
	MedianQueue  float64 `json:"median_queue_s"`
	P95Queue     float64 `json:"p95_queue_s"`
	P99Queue     float64 `json:"p99_queue_s"`
	MaxQueue     float64 `json:"max_queue_s"`
	Utilization  float64 `json:"utilization"`
	Preemptions  int     `json:"preemptions"`
	LostGPUHours float64 `json:"lost_gpu_hours"`
	// MakespanS is from the first submission to the last end.
	MakespanS float64 `json:"makespan_s"`
	// Backfilled counts dispatches ahead of a reservation (gpuq policies).
	Backfilled int `json:"backfilled"`
	// MaxQueued is the longest the queue got (tasks waiting at once).
	MaxQueued int `json:"max_queued"`
	// ByClass splits the queueing delay by the tasks' class (the classes
	// they were submitted in); omitted when every task is of one class.
	ByClass map[string]ClassMetrics `json:"by_class,omitempty"`
}

// ClassMetrics are one class's queueing delays (seconds).
type ClassMetrics struct {
	N        int     `json:"n"`
	AvgQueue float64 `json:"avg_queue_s"`
	P95Queue float64 `json:"p95_queue_s"`
	MaxQueue float64 `json:"max_queue_s"`
}

// byClass splits an outcome's queueing delays by class; nil when every
// task is of one class (the overall figures say it all).
func byClass(tasks []Task, o *outcome) map[string]ClassMetrics {
	waits := map[string][]float64{}
	for i, t := range tasks {
		c := t.Priority.String()
		waits[c] = append(waits[c], (o.start[i] - t.Submit).Seconds())
	}
	if len(waits) < 2 {
		return nil
	}
	out := map[string]ClassMetrics{}
	for c, w := range waits {
		sum := 0.0
		for _, x := range w {
			sum += x
		}
		slices.Sort(w)
		out[c] = ClassMetrics{N: len(w), AvgQueue: round(sum/float64(len(w)), 2), P95Queue: round(nearestRank(w, 0.95), 2), MaxQueue: round(w[len(w)-1], 2)}
	}
	return out
}

// metrics summarises an outcome on a cluster of totalGPUs.
func metrics(tasks []Task, o *outcome, totalGPUs int) Metrics {
	n := len(tasks)
	if n == 0 {
		return Metrics{}
	}
	jct := make([]float64, n)
	wait := make([]float64, n)
	first, last := tasks[0].Submit, time.Duration(0)
	var sumJ, sumW float64
	for i, t := range tasks {
		jct[i] = (o.end[i] - t.Submit).Seconds()
		wait[i] = (o.start[i] - t.Submit).Seconds()
		sumJ += jct[i]
		sumW += wait[i]
		first = min(first, t.Submit)
		last = max(last, o.end[i])
	}
	slices.Sort(jct)
	slices.Sort(wait)
	m := Metrics{
		AvgJCT: round(sumJ/float64(n), 2), MedianJCT: round(nearestRank(jct, 0.5), 2), P95JCT: round(nearestRank(jct, 0.95), 2),
		AvgQueue: round(sumW/float64(n), 2), MedianQueue: round(nearestRank(wait, 0.5), 2), P95Queue: round(nearestRank(wait, 0.95), 2),
		P99Queue: round(nearestRank(wait, 0.99), 2), MaxQueue: round(wait[n-1], 2),
		Preemptions: o.preemptions, LostGPUHours: round(o.lostGPUSeconds/3600, 4),
		MakespanS: round((last - first).Seconds(), 2), Backfilled: o.backfilled,
	}
	if span := (last - first).Seconds(); span > 0 && totalGPUs > 0 {
		m.Utilization = round(o.busyGPUSeconds/(float64(totalGPUs)*span), 4)
	}
	for _, p := range o.queueLen {
		m.MaxQueued = max(m.MaxQueued, p.N)
	}
	return m
}

// nearestRank is the p-th percentile of sorted, non-empty xs.
func nearestRank(xs []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// round keeps d decimals, so that the JSON does not carry float noise.
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}
