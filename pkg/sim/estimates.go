package sim

import (
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Estimators compared under the gpuq policy.
const (
	EstGPUQ  = "gpuq"
	EstSlurm = "slurm-backfill"
	EstSeed  = "seed-formula"
)

// minJudgedWait: estimates are judged over tasks that waited this long.
const minJudgedWait = 60 * time.Second

// estimating makes the three start estimates at every submission.
type estimating struct {
	est *estimate.Estimator

	gpuq   []func() estimate.Estimate // nil: none made
	slurm  []time.Duration            // -1: never starts
	seed   []time.Duration
	timing EstimateTimings
	alarms *alarming // the run's alarms, when measured (alarms.go)
}

// EstimateTimings is the wall time spent estimating (not part of the
// deterministic result).
type EstimateTimings struct {
	Submissions int
	GPUQ        time.Duration // the estimator's Observe, every record
	Slurm       time.Duration
	Seed        time.Duration
}

func newEstimating(pol *policy.Policy, n int, coarse float64, workers int) *estimating {
	est := estimate.NewEstimator(pol)
	if coarse != 0 {
		est.Coarse = coarse
	}
	est.Workers = workers
	if workers <= 0 {
		est.Workers = runtime.GOMAXPROCS(0)
	}
	return &estimating{est: est,
		gpuq: make([]func() estimate.Estimate, n), slurm: make([]time.Duration, n), seed: make([]time.Duration, n)}
}

// observe feeds the estimator one record (the state has applied it) and,
// on a submission, records the three estimates made then.
func (e *estimating) observe(d *driver, r events.Record) {
	t0 := time.Now()
	e.est.Observe(d.st, r)
	e.timing.GPUQ += time.Since(t0)
	sub, ok := r.Event.(events.Submitted)
	if !ok {
		return
	}
	i, known := d.byID[sub.TaskID]
	t := d.st.Tasks[sub.TaskID]
	if !known || t == nil || t.SubmitSeq != r.Seq {
		return
	}
	e.timing.Submissions++
	e.gpuq[i], _ = e.est.AtSubmitLater(t.ID)

	t1 := time.Now()
	e.slurm[i] = slurmStart(d.st, t, d.now)
	t2 := time.Now()
	e.seed[i] = estimate.SeedFormula(queuedView(d.st, t.Priority), t)
	e.timing.Slurm += t2.Sub(t1)
	e.timing.Seed += time.Since(t2)
}

// queuedView is a read-only view of st holding only its queued tasks of
// the classes above p, its nodes and GPU owners: all that SeedFormula
// reads for a task of class p (it sums the queued tasks of higher
// classes), at a cost that grows with those tasks rather than the history
// or the whole queue (SeedFormula walks every task of the view).
func queuedView(st *domain.State, p domain.Priority) *domain.State {
	v := &domain.State{Tasks: map[string]*domain.Task{}, Nodes: st.Nodes, Owner: st.Owner}
	for q := p + 1; q <= domain.Critical; q++ {
		for c := st.QueueClass(q); c.Peek() != nil; c.Next() {
			t := c.Peek()
			v.Tasks[t.ID] = t
		}
	}
	return v
}

// EstimateMetrics judge one estimator at submission, over tasks whose
// actual wait was at least 60 s.
type EstimateMetrics struct {
	ClassEstimate
	// ByClass judges the estimator on each class's tasks (the classes they
	// were submitted in); omitted when every judged task is of one class.
	ByClass map[string]ClassEstimate `json:"by_class,omitempty"`
	// Alarms judge the advisor's alarm (gpuq only, with --alarms or
	// --fault; alarms.go).
	Alarms *AlarmMetrics `json:"alarms,omitempty"`
}

// ClassEstimate judges one estimator on a set of tasks: all of them in
// EstimateMetrics, one class's in its ByClass.
type ClassEstimate struct {
	N int `json:"n"`
	// P90Coverage is the share of tasks that started by the P90 (for a
	// single-number estimator: by its estimate).
	P90Coverage float64 `json:"p90_coverage"`
	// P90CoverageByQuarter splits the tasks by submit time into four equal
	// spans of the trace; null where a quarter has no judged task.
	P90CoverageByQuarter [4]*float64 `json:"p90_coverage_by_quarter"`
	NByQuarter           [4]int      `json:"n_by_quarter"`
	// P50MedianAbsErrS is the median of |actual − P50| (single-number
	// estimators: |actual − estimate|).
	P50MedianAbsErrS float64 `json:"p50_median_abs_err_s"`
	// Never counts tasks the estimator said would never start.
	Never int `json:"never"`
}

// WaitEstimate is one judged task's estimate and actual wait (for plots).
type WaitEstimate struct {
	Submit, P50, P90, Actual time.Duration
}

// judge scores the three estimators against the gpuq run's actual starts.
func (e *estimating) judge(tasks []Task, o *outcome) (map[string]EstimateMetrics, []WaitEstimate) {
	first, last := tasks[0].Submit, tasks[0].Submit
	for _, t := range tasks {
		first, last = min(first, t.Submit), max(last, t.Submit)
	}
	quarter := func(at time.Duration) int {
		if last == first {
			return 0
		}
		return min(3, int(4*float64(at-first)/float64(last-first)))
	}
	accs := map[string]*acc{EstGPUQ: {}, EstSlurm: {}, EstSeed: {}}
	classes := map[string]map[string]*acc{EstGPUQ: {}, EstSlurm: {}, EstSeed: {}}
	class := ""
	score := func(name string, q int, actual, est time.Duration, never bool, coverBy time.Duration) {
		a := classes[name][class]
		if a == nil {
			a = &acc{}
			classes[name][class] = a
		}
		a.add(q, actual, est, never, coverBy)
		accs[name].add(q, actual, est, never, coverBy)
	}
	var waits []WaitEstimate
	for i, t := range tasks {
		actual := o.start[i] - t.Submit
		if o.start[i] < 0 || actual < minJudgedWait {
			continue
		}
		class = t.Priority.String()
		q := quarter(t.Submit)
		var g estimate.Estimate
		if e.gpuq[i] != nil {
			g = e.gpuq[i]()
		}
		never := e.gpuq[i] == nil || g.Never
		score(EstGPUQ, q, actual, g.P50Wait, never, g.P90Wait)
		s := e.slurm[i]
		score(EstSlurm, q, actual, max(s, 0), s < 0, s)
		score(EstSeed, q, actual, e.seed[i], false, e.seed[i])
		if !never {
			waits = append(waits, WaitEstimate{Submit: t.Submit, P50: g.P50Wait, P90: g.P90Wait, Actual: actual})
		}
	}
	out := map[string]EstimateMetrics{}
	for name, a := range accs {
		m := EstimateMetrics{ClassEstimate: a.metrics()}
		if cs := classes[name]; len(cs) > 1 {
			m.ByClass = map[string]ClassEstimate{}
			for c, ca := range cs {
				m.ByClass[c] = ca.metrics()
			}
		}
		out[name] = m
	}
	return out, waits
}

// acc accumulates one estimator's judgement.
type acc struct {
	n, covered, never int
	qn, qc            [4]int
	errs              []float64
}

func (a *acc) add(q int, actual, est time.Duration, never bool, coverBy time.Duration) {
	a.n++
	a.qn[q]++
	if never {
		a.never++
	} else if actual.Seconds() <= coverBy.Seconds()+1 {
		a.covered++
		a.qc[q]++
	}
	a.errs = append(a.errs, math.Abs(actual.Seconds()-est.Seconds()))
}

func (a *acc) metrics() ClassEstimate {
	m := ClassEstimate{N: a.n, NByQuarter: a.qn, Never: a.never}
	if a.n > 0 {
		m.P90Coverage = round(float64(a.covered)/float64(a.n), 4)
		slices.Sort(a.errs)
		m.P50MedianAbsErrS = round(medianSorted(a.errs), 2)
	}
	for q := range 4 {
		if a.qn[q] > 0 {
			c := round(float64(a.qc[q])/float64(a.qn[q]), 4)
			m.P90CoverageByQuarter[q] = &c
		}
	}
	return m
}

// medianSorted is the median of sorted, non-empty xs (the mean of the two
// middle values for an even count, as the estimator's own Stats).
func medianSorted(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
