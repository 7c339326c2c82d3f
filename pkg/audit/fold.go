package audit

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// folder is the fold of a log as the scheduler keeps it: the state and the
// run-time predictor, which learns from every completed task.
type folder struct {
	st   *domain.State
	pred *estimate.Predictor
	fold *estimate.Fold // st and pred: the scheduler's fold
}

func newFolder() *folder {
	f := estimate.NewFold()
	return &folder{st: f.State, pred: f.Pred, fold: f}
}

// apply folds one record and returns why it was skipped ("" if applied).
func (f *folder) apply(r events.Record) string { return f.fold.Apply(r) }

// applyCoded is apply with the code of why the record was skipped.
func (f *folder) applyCoded(r events.Record) (domain.SkipCode, string) { return f.fold.ApplyCoded(r) }

// plan runs the policy, with reasons, on the state as folded, at the
// fold's own time.
func (f *folder) plan(pol *policy.Policy) policy.Result {
	now := f.st.LastTime
	return pol.With(true).Plan(policy.Input{State: f.st, Now: now, Predict: f.pred.ForPolicy(now)})
}

// foldTo applies records to a new folder, up to and including sequence
// upto (0: all of them).
func foldTo(recs []events.Record, upto uint64) *folder {
	f := newFolder()
	for _, r := range recs {
		if upto > 0 && r.Seq > upto {
			break
		}
		f.apply(r)
	}
	return f
}

// SeqAt is the sequence of the last record whose log time (Record.At) is
// not after t; 0 when the first record is later.
func SeqAt(recs []events.Record, t time.Time) uint64 {
	var seq uint64
	for _, r := range recs {
		if r.At().After(t) {
			break
		}
		seq = r.Seq
	}
	return seq
}
