// What only the tests use: the forward simulation for one task or the
// whole queue alone (the estimator runs it through forward), the advice of
// every queued task at once (the advisor goes through Live.Advise), and
// the predictor's count of runs.
package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Forward is forward for one task, one pass per event (window 0).
func Forward(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival) (time.Time, bool) {
	return ForwardWindow(st, pol, pred, now, target, q, arrivals, 0)
}

// ForwardWindow is Forward with forward's coarser steps.
func ForwardWindow(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, target string, q float64, arrivals []Arrival, window float64) (time.Time, bool) {
	starts, _ := forward(st, pol, pred, now, target, q, arrivals, forwardSteps, window)
	at, ok := starts[target]
	return at, ok
}

// ForwardAll is Forward for every queued task at once — one simulation
// until all of them started — which is what re-estimating the whole queue
// after an event costs. Tasks missing from the result never start.
func ForwardAll(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, q float64, arrivals []Arrival) map[string]time.Time {
	return ForwardAllWindow(st, pol, pred, now, q, arrivals, 0)
}

// ForwardAllWindow is ForwardAll with ForwardWindow's coarser steps.
func ForwardAllWindow(st *domain.State, pol *policy.Policy, pred *Predictor, now time.Time, q float64, arrivals []Arrival, window float64) map[string]time.Time {
	starts, _ := forward(st, pol, pred, now, "", q, arrivals, forwardAllSteps, window)
	return starts
}

// Advise is the advice for every queued task, in queue order: when (P50
// and P90 from one forward simulation of the real policy), why (the
// policy's own explanation), what to do meanwhile (the first undone
// playbook item), an alert when the wait passed 2× the estimate made at
// submission, and suggestions.
func (e *Estimator) Advise(st *domain.State, now time.Time) []Advice {
	ests := e.EstimateAll(st, now)
	res := e.Pol.With(true).Plan(policy.Input{State: st, Now: now, Predict: e.Pred.ForPolicy(now)})
	e.Watch(st, res, now)
	why := res.Waiting
	var out []Advice
	for i, t := range st.Queued() {
		out = append(out, e.advise(st, t, i+1, ests[t.ID], why[t.ID], now))
	}
	return out
}

// Samples reports how many ratios the predictor has learned.
func (p *Predictor) Samples() int { return p.global.n() }
