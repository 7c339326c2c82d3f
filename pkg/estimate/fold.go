package estimate

import (
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Learn learns from a record just folded into st: an applied completion
// teaches p the task's run time (Observe). Every fold that keeps a
// predictor calls it — the scheduler's, the advisor's estimator, audit's
// replay, the bench — so they learn alike and audit sees what the live
// scheduler saw. It reports whether p learned.
func (p *Predictor) Learn(st *domain.State, r events.Record) bool {
	c, ok := r.Event.(events.Completed)
	if !ok {
		return false
	}
	t := st.Tasks[c.TaskID]
	if t == nil {
		return false
	}
	p.Observe(t)
	return true
}

// Fold is the scheduler's fold, state and predictor: the state, and the
// predictor learning run times from the completions applied to it.
type Fold struct {
	State *domain.State
	Pred  *Predictor
}

// NewFold returns an empty fold with a predictor of the default prior.
func NewFold() *Fold { return &Fold{State: domain.NewState(), Pred: NewPredictor(0)} }

// Apply folds r and learns from it; it returns why r was skipped ("" if
// applied), as domain.State.Apply.
func (f *Fold) Apply(r events.Record) string {
	_, why := f.ApplyCoded(r)
	return why
}

// ApplyCoded is Apply with the code of why r was skipped beside the text,
// as domain.State.ApplyCoded.
func (f *Fold) ApplyCoded(r events.Record) (domain.SkipCode, string) {
	code, why := f.State.ApplyCoded(r)
	if why == "" {
		f.Pred.Learn(f.State, r)
	}
	return code, why
}
