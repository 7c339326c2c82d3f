package estimate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Suggestion is advice to act: a cheaper shape for the task, or a question.
type Suggestion struct {
	Kind     string  `json:"kind"` // fewer_gpus | still_needed
	Text     string  `json:"text"`
	Command  string  `json:"command,omitempty"`
	P50WaitS float64 `json:"p50_wait_s,omitempty"` // the what-if's estimate
	Never    bool    `json:"never,omitempty"`      // the what-if could not start either
}

// Mindset thresholds from the source document.
const (
	AlertFactor     = 2.0           // waited > 2× the P50 estimated at submission
	FewerGPUsFactor = 3.0           // waited > 3× the task's estimated run time
	LowStillNeeded  = 2 * time.Hour // a LOW task waiting longer than this
	// AlertMinWait: no alert before this wait, so that a task estimated to
	// start at once (or within seconds) alerts when it has not started
	// half a minute later, not on the scheduler's ordinary delay (2× an
	// estimate of 0 is 0).
	AlertMinWait = 30 * time.Second
)

// AdviseOne is the advice for one task (queued or not).
func (e *Estimator) AdviseOne(st *domain.State, id string, now time.Time) (Advice, bool) {
	t := st.Tasks[id]
	if t == nil {
		return Advice{}, false
	}
	if t.State != domain.Queued {
		a := Advice{TaskID: id, State: string(t.State), Blockers: []string{}, Suggestions: []Suggestion{}, BasedOnSeq: st.Seq, At: now}
		if !t.FirstStarted.IsZero() {
			a.P50Start, a.P90Start = t.FirstStarted, t.FirstStarted
		}
		return a, true
	}
	why := e.Pol.With(true).Plan(policy.Input{State: st, Now: now, Predict: e.Pred.ForPolicy(now)}).Waiting
	// A task the policy starts in this pass has no Wait: its place in the
	// queue, as Advise gives it.
	pos := 0
	for i, q := range st.Queued() {
		if q.ID == id {
			pos = i + 1
			break
		}
	}
	return e.advise(st, t, pos, e.Estimate(st, id, now), why[id], now), true
}

func (e *Estimator) advise(st *domain.State, t *domain.Task, pos int, est Estimate, w policy.Wait, now time.Time) Advice {
	act := NextAction(t)
	a := Advice{
		TaskID: t.ID, State: string(t.State), Position: pos,
		P50WaitS: est.P50Wait.Seconds(), P90WaitS: est.P90Wait.Seconds(), P50Start: est.P50Start, P90Start: est.P90Start,
		Method: "forward-simulation", Reason: w.Reason, Blockers: w.Blockers,
		Action: act.Item, ActionText: act.Text, Suggestions: []Suggestion{}, BasedOnSeq: st.Seq, At: now,
	}
	if w.Position > 0 {
		a.Position = w.Position
	}
	if a.Reason == "" {
		a.Reason = "starting" // the policy places it in this very pass
	}
	if a.Blockers == nil {
		a.Blockers = []string{}
	}
	if est.Capped {
		// The simulation's budget ran out before the task started: the
		// start is at least this late.
		a.Method = "capped"
	}
	if est.Never {
		// It cannot start: say so first, then the change that would let it
		// start (one the policy confirms), or that there is none.
		a.Method = "never"
		a.Reason = w.Reason
		if a.Reason == "" {
			a.Reason = policy.ReasonUnsatisfiable
		}
		a.Basis = ""
		e.adviseNever(st, t, &a, now)
	} else {
		a.Basis = e.basis(st, t, w)
	}
	a.RunS = e.Pred.LeftToRun(t, 0.5).Seconds()
	if !t.Deadline.IsZero() {
		dl := t.Deadline
		a.Deadline = &dl
		if est.Never {
			a.DeadlineAtRisk, a.DeadlineReason = true, "may miss its deadline "+Clock(dl, now)+": it cannot start on this cluster as it is"
		} else {
			a.DeadlineAtRisk, a.DeadlineReason = DeadlineRisk(dl, a.P90Start, time.Duration(a.RunS*float64(time.Second)), now)
		}
	}
	waited := now.Sub(t.SubmittedAt)
	// The one moment to worry: the wait passed 2× the estimate at
	// submission (the seed's rule: Alert says so, as it always has), and
	// its breakdown says whether scheduling is broken (late.go): only
	// then is it an alarm (Late.Alarm: the operators' metric and log, the
	// alert notification); a legitimate reason revises the estimate and
	// the text says so.
	if v, ok := e.Late(t, now); ok {
		a.Late = &v
		a.Alert = v.Text()
	}
	// Fewer GPUs, through amend (keeps the place), not cancel-and-resubmit;
	// only when the policy's what-if starts it sooner than now estimated.
	if !est.Never && t.GPUs > 1 && waited.Seconds() > FewerGPUsFactor*t.Hours*3600 {
		n := t.GPUs / 2
		// Suggested only when the policy confirms it helps: the what-if
		// starts sooner (over the Live's budget, a later advice has it).
		if wi, ok := e.fewerGPUs(st, t.ID, n, now); ok && !wi.Never && wi.P50Wait < est.P50Wait {
			a.Suggestions = append(a.Suggestions, Suggestion{Kind: "fewer_gpus", Command: fmt.Sprintf("gpuq amend %s --gpus %d", t.ID, n),
				Text: fmt.Sprintf("waited more than %g× its estimated run time; with %d GPUs it would start %s. Amend keeps its place; cancel-and-resubmit would lose it",
					FewerGPUsFactor, n, startsIn(wi)), P50WaitS: wi.P50Wait.Seconds()})
		}
	}
	if t.Priority == domain.Low && waited > LowStillNeeded {
		a.Suggestions = append(a.Suggestions, Suggestion{Kind: "still_needed",
			Text: fmt.Sprintf("a LOW task waiting %s: is this experiment still needed? If not, `gpuq cancel %s` frees its place", waited.Round(time.Minute), t.ID)})
	}
	return a
}

// CannotStart is the action for a task that cannot start on the cluster
// as it is now although a node could hold it (drained or lost nodes,
// unhealthy GPUs): waiting for them may help.
const CannotStart = "cannot_start"

// adviseNever is the action, and a suggestion when one helps, for a task
// that cannot start: the change of request that lets it start (the
// largest GPU count tried — the cluster's, then halving — at which the
// policy's what-if starts it), else none.
// A task no node could ever hold gets change_request; one that would fit
// with the cluster's missing capacity back, cannot_start.
func (e *Estimator) adviseNever(st *domain.State, t *domain.Task, a *Advice, now time.Time) {
	fe := policy.Unplaceable(st, t)
	var fix *Suggestion
	// The cluster's GPU count first (what a task asking for more than
	// the cluster has wants), then halving.
	var tries []int
	if total, _ := st.TotalGPUs(); total >= 1 && total < t.GPUs {
		tries = append(tries, total)
	}
	for n := t.GPUs / 2; n >= 1; n /= 2 {
		if len(tries) == 0 || n < tries[0] {
			tries = append(tries, n)
		}
	}
	for i, n := range tries {
		if fix != nil || i == 3 { // a few what-ifs: each is a forward simulation
			break
		}
		if wi := e.WhatIf(st, t.ID, n, 0, now); !wi.Never {
			fix = &Suggestion{Kind: "fewer_gpus", Command: fmt.Sprintf("gpuq amend %s --gpus %d", t.ID, n),
				Text: fmt.Sprintf("with %d GPUs it would start %s. Amend keeps its place", n, startsIn(wi)), P50WaitS: wi.P50Wait.Seconds()}
		}
	}
	why := a.Reason
	if fe != nil {
		a.Reason = policy.ReasonUnsatisfiable
		a.Action = ChangeRequest
		why = fe.Field + ": " + fe.Rule
	} else {
		a.Action = CannotStart
	}
	a.ActionText = fmt.Sprintf("It cannot start on this cluster as it is (%s). ", why)
	switch {
	case fix != nil:
		a.ActionText += fmt.Sprintf("Change the request: %s (%s).", fix.Text, fix.Command)
		a.Suggestions = append(a.Suggestions, *fix)
	case fe != nil:
		a.ActionText += "No GPU count lets it start; cancel it and submit what the cluster has. Waiting will not help."
	default:
		a.ActionText += "No change of the request lets it start: it starts when the missing nodes or GPUs are back (ask an operator)."
	}
}

// startsIn is a what-if's start in words.
func startsIn(wi Estimate) string {
	if wi.P50Wait <= 0 {
		return "at once"
	}
	return fmt.Sprintf("in about %s (P50)", wi.P50Wait.Round(time.Minute))
}

// basis says what a wait estimate rests on: the run-time predictions of
// the tasks it waits for (the policy's blockers; none: free GPUs), as
// "r1, r2: your estimate; r3: learned from 14 runs of team vision"
// (Predictor.Basis).
func (e *Estimator) basis(st *domain.State, t *domain.Task, w policy.Wait) string {
	if len(w.Blockers) == 0 {
		if w.Reason == "" {
			return "free GPUs"
		}
		return "the forward simulation of the queue"
	}
	var order []string
	by := map[string][]string{}
	for _, id := range w.Blockers {
		b := st.Tasks[id]
		if b == nil {
			continue
		}
		s := e.Pred.Basis(b)
		if _, ok := by[s]; !ok {
			order = append(order, s)
		}
		by[s] = append(by[s], id)
	}
	var parts []string
	for _, s := range order {
		ids := by[s]
		more := ""
		if len(ids) > 3 {
			more = fmt.Sprintf(" and %d more", len(ids)-3)
			ids = ids[:3]
		}
		parts = append(parts, fmt.Sprintf("%s%s: %s", strings.Join(ids, ", "), more, s))
	}
	return strings.Join(parts, "; ")
}

// WhatIf estimates the task as if it asked for gpus GPUs (0: unchanged) at
// priority prio (0: unchanged). The state is not touched: the change is
// applied to a copy of the live tasks.
func (e *Estimator) WhatIf(st *domain.State, id string, gpus int, prio domain.Priority, now time.Time) Estimate {
	c := whatIfState(st, id, gpus, prio, now)
	if c == nil {
		return Estimate{Never: true}
	}
	return e.Estimate(c, id, now)
}

// Material reports whether new advice differs enough from the last one
// published to publish again: position, reason, blocking tasks, method,
// action or state changed, an alert was raised or cleared, a suggestion
// of another kind appeared or went, or the P50 moved by more than a minute
// and 10%. Texts that only restate the growing wait (the alert's, the
// suggestions') are not material: they would republish on every pass.
func Material(old, cur Advice) bool {
	if old.Position != cur.Position || old.Reason != cur.Reason || old.Action != cur.Action || old.State != cur.State ||
		old.Method != cur.Method || (old.Alert == "") != (cur.Alert == "") || old.DeadlineAtRisk != cur.DeadlineAtRisk ||
		lateKey(old.Late) != lateKey(cur.Late) ||
		!slices.Equal(old.Blockers, cur.Blockers) || !slices.Equal(kinds(old.Suggestions), kinds(cur.Suggestions)) {
		return true
	}
	d := cur.P50WaitS - old.P50WaitS
	if d < 0 {
		d = -d
	}
	return d > 60 && d > 0.1*maxf(old.P50WaitS, 1)
}

func kinds(ss []Suggestion) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Kind
	}
	return out
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// lateKey is what of a late verdict makes advice material: whether it is
// late, an alarm, and its cause or reason.
func lateKey(v *alarm.Verdict) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf("%t/%s/%s", v.Alarm, v.Cause, v.Reason)
}
