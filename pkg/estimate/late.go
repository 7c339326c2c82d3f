package estimate

import (
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The alarm: a wait past AlertFactor × the P50 estimated at submission is
// classified by its breakdown (pkg/alarm) — broken scheduling raises the
// alert, naming the cause and the operators; a legitimate reason revises
// the estimate with that reason. The advisor and `gpuq sim` both judge a
// wait with Late, on a breakdown both add up with Watch.

// tracker is the estimator's alarm.Tracker (made on first use).
func (e *Estimator) tracker() *alarm.Tracker {
	if e.waits == nil {
		e.waits = alarm.NewTracker()
	}
	return e.waits
}

// Watch observes the queue for the alarm's breakdown: res is a pass of
// the policy with reasons on st at now (the advisor's, each time it
// re-estimates every task).
func (e *Estimator) Watch(st *domain.State, res policy.Result, now time.Time) {
	e.tracker().Observe(st, res, now)
}

// WatchNow is Watch with its own pass of the policy.
func (e *Estimator) WatchNow(st *domain.State, now time.Time) {
	e.Watch(st, e.Pol.With(true).Plan(policy.Input{State: st, Now: now, Predict: e.Pred.ForPolicy(now)}), now)
}

// Threshold is the wait past which a task estimated (at submission) to
// wait est is late: AlertFactor × its P50, and at least AlertMinWait.
func Threshold(est Estimate) time.Duration {
	return max(time.Duration(AlertFactor*float64(est.P50Wait)), AlertMinWait)
}

// Late judges the wait of queued task t at now: ok is false while it has
// not passed Threshold of its estimate at submission (or had none, or was
// said never to start); else the Verdict of alarm.Classify on its
// breakdown as Watch added it up.
func (e *Estimator) Late(t *domain.Task, now time.Time) (v alarm.Verdict, ok bool) {
	if t == nil || t.State != domain.Queued {
		return v, false
	}
	if now.Sub(t.SubmittedAt) <= AlertMinWait {
		// Within AlertMinWait, which Threshold never goes under: not late
		// whatever the estimate, so the estimate at submission is not
		// waited for (with Workers its simulation may still run: the advice
		// after a submission does not wait for it).
		return v, false
	}
	sub, ok := e.AtSubmit(t.ID)
	if !ok || sub.Never {
		return v, false
	}
	waited, th := now.Sub(t.SubmittedAt), Threshold(sub)
	if waited <= th {
		return v, false
	}
	b, tracked := e.tracker().Breakdown(t.ID, waited, sub.P50Wait, th)
	if !tracked {
		// Not observed yet (an advisor just restarted): nothing known,
		// nothing broken — judged at its next observation.
		b = alarm.Breakdown{WaitS: waited.Seconds(), EstimateS: sub.P50Wait.Seconds(), ThresholdS: th.Seconds()}
		b.Legit = map[string]float64{alarm.HoldersOverran: waited.Seconds()}
	}
	return alarm.Classify(b), true
}

// Watching reports whether the alarm's breakdown follows any task.
func (e *Estimator) Watching() bool { return e.waits != nil && e.waits.Tracked() > 0 }
