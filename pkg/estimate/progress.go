package estimate

import (
	"fmt"
	"math"

	"github.com/gpuq/gpuq/pkg/domain"
)

// Progress: a running task that reported its progress (progress_reported,
// folded into domain.Task) has its remaining run time extrapolated from
// it — the run so far at the report, done, over the fraction f reported
// gives the whole run, done/f, so what remains at the report is
// done × (1 − f)/f — and that extrapolation is blended with the learned
// prediction (Remaining) by how well it has held for the task's groups.
//
// The predictor learns the extrapolation's error as it learns the ratio
// of actual to estimated run time: at each completion of a task that
// reported progress in its last run, the log-ratio of its actual run time
// to the one extrapolated from its last report, by team and by name
// prefix, shrunk toward every group's (Shrink), and the whole shrunk
// toward progressPrior while the errors learned are few
// (ProgressPriorRuns).
//
// The blend is in log space, remaining = P^w · L^(1−w) for the progress's
// quantile P and the learned one L, with the weight w of the progress
// = (n·w_data + ProgressPriorRuns·DefaultProgressWeight)/(n + ProgressPriorRuns):
// n is the errors learned in the task's larger group (team or prefix),
// w_data = s_L²/(s_L² + s_P²) weighs the two by their spreads (the
// interquartile ranges of the learned log-ratio and of the progress
// errors), and a group with no evidence gets DefaultProgressWeight. The
// conditional-remaining rule holds as before: never below 5 s or a tenth
// of the run so far.

// ProgressPriorRuns is the pseudo-count of the progress's default weight
// and of its error's prior: after n errors learned the group's own weigh
// n/(n+ProgressPriorRuns).
const ProgressPriorRuns = 20

// DefaultProgressWeight is the progress's weight for a task whose groups
// have no evidence yet: moderate, as a report says how far a job is, not
// whether it will run to its end.
const DefaultProgressWeight = 0.5

// progressPrior is the prior of the extrapolation's log error: centred
// (the report is taken at its word), a factor of 1.5 at the P90.
func progressPrior(q float64) float64 {
	return progressPriorScale * normQuantile(q)
}

// progressPriorScale is progressPrior's factor (math.Log(1.5) / 1.2816).
var progressPriorScale = math.Log(1.5) / 1.2816

// progressTotal is t's whole run, in seconds, extrapolated from its
// latest progress report: ok only for a task holding GPUs whose report
// is of its current run, with a fraction above 0. The run so far at the
// report counts the earlier runs (RunSeconds), as a job resumed from a
// checkpoint reports its progress in the whole job.
func progressTotal(t *domain.Task) (total float64, ok bool) {
	if t.ProgressAt.IsZero() || !(t.ProgressFraction > 0) || t.ProgressFraction > 1 || t.StartedAt.IsZero() ||
		t.ProgressAt.Before(t.StartedAt) || (t.State != domain.Running && t.State != domain.Preempting) {
		return 0, false
	}
	done := t.RunSeconds + t.ProgressAt.Sub(t.StartedAt).Seconds()
	if !(done > 0) {
		return 0, false
	}
	return min(done/t.ProgressFraction, maxPredictS), true
}

// observeProgress learns the extrapolation's error from a completed task
// that reported progress in its last run (after its last dispatch): the
// run so far at the report is its whole run less the time from the
// report to its end.
func (p *Predictor) observeProgress(t *domain.Task) {
	if t.State != domain.Completed || t.ProgressAt.IsZero() || !(t.ProgressFraction > 0) || t.ProgressFraction > 1 ||
		t.ProgressAt.Before(t.DispatchedAt) || t.EndedAt.Before(t.ProgressAt) {
		return
	}
	done := t.RunSeconds - t.EndedAt.Sub(t.ProgressAt).Seconds()
	if !(done > 0) {
		return
	}
	e := math.Log(t.RunSeconds * t.ProgressFraction / done)
	if math.IsNaN(e) || math.IsInf(e, 0) {
		return
	}
	defer p.changed()
	if p.pglobal.max == 0 { // a predictor made without NewPredictor
		p.pglobal.max = max(p.window, 1)
	}
	if p.pteam == nil {
		p.pteam, p.pprefix = map[string]*ring{}, map[string]*ring{}
	}
	p.pglobal.add(e)
	p.group(p.pteam, t.Team).add(e)
	p.group(p.pprefix, Prefix(t.Name)).add(e)
}

// progressFn resolves t's progress-error quantile function into f, as
// ratioOf does the ratio's, and returns the errors learned in t's larger
// group.
func (p *Predictor) progressFn(t *domain.Task, f *ratioFn) (groupN int) {
	return p.progressFnPrefix(t, Prefix(t.Name), f)
}

// progressFnPrefix is progressFn given t's name's Prefix.
func (p *Predictor) progressFnPrefix(t *domain.Task, prefix string, f *ratioFn) (groupN int) {
	f.prog = true
	if p.pglobal.n() == 0 {
		f.prior = true
		return 0
	}
	return f.setLearned(&p.pglobal, ProgressPriorRuns, p.pteam[t.Team], p.pprefix[prefix])
}

// progressWeight is the progress's weight in t's prediction, given its
// learned log-ratio function lf and its progress-error function pf
// (progressFn, whose groups hold n errors).
func progressWeight(lf, pf *ratioFn, n int) float64 {
	if n == 0 {
		return DefaultProgressWeight
	}
	sl := lf.at(0.75) - lf.at(0.25)
	sp := pf.learned(0.75) - pf.learned(0.25)
	wd := 1.0
	if d := sl*sl + sp*sp; d > 0 {
		wd = sl * sl / d
	}
	k := float64(ProgressPriorRuns)
	return (float64(n)*wd + k*DefaultProgressWeight) / (float64(n) + k)
}

// withProgress blends the learned remaining run rem (seconds) of t, done
// seconds into its run, with the q-quantile of what remains of tot, the
// run extrapolated from its progress, conditioned as Remaining's on the
// run so far. lf is t's learned log-ratio function.
func (p *Predictor) withProgress(t *domain.Task, prefix string, lf *ratioFn, tot, done, q, rem float64) float64 {
	var pf ratioFn
	n := p.progressFnPrefix(t, prefix, &pf)
	u := p.cdf(&pf, memoKey{team: t.Team, prefix: prefix}, math.Log(done/tot))
	qq := min(u+q*(1-u), 0.995)
	remP := tot*math.Exp(pf.at(qq)) - done
	w := progressWeight(lf, &pf, n)
	const floor = 1.0 // s: the logs need a positive remainder; Remaining's floor applies after
	return math.Exp(w*math.Log(max(remP, floor)) + (1-w)*math.Log(max(rem, floor)))
}

// ProgressWeight is the weight t's reported progress has in its
// prediction (0 when it has none usable: not running, or no report of
// this run).
func (p *Predictor) ProgressWeight(t *domain.Task) float64 {
	if p.Exact || p.NoProgress {
		return 0
	}
	if _, ok := progressTotal(t); !ok {
		return 0
	}
	var lf, pf ratioFn
	p.ratioOf(t, &lf)
	n := p.progressFn(t, &pf)
	return progressWeight(&lf, &pf, n)
}

// progressBasis is Basis for a task whose progress carries its
// prediction (a weight of at least a half): "progress 40 %".
func (p *Predictor) progressBasis(t *domain.Task) (string, bool) {
	if p.ProgressWeight(t) < 0.5 {
		return "", false
	}
	return fmt.Sprintf("progress %d %%", int(math.Floor(t.ProgressFraction*100))), true
}
