package notifier

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

// Rules are the thresholds of the predictive notices.
type Rules struct {
	// SoonWithin: starts_soon once the P50 start is this close (10 min).
	SoonWithin time.Duration
	// SoonRearm: a starts_soon already sent is armed again (sent once
	// more, with a new id) only after the P50 start moved this far away
	// again (30 min): the hysteresis that keeps an estimate hovering
	// around SoonWithin from sending it on every wobble.
	SoonRearm time.Duration
	// SuggestMin: a suggestion (a what-if the policy confirms) is sent
	// only when it saves at least this much of the P50 wait (30 min).
	SuggestMin time.Duration
	// ETAMin and ETAFraction: eta_changed when the P50 start moved by
	// more than max(ETAMin, ETAFraction × the remaining wait) since the
	// last estimate the task's owner was told (or the first one seen).
	ETAMin      time.Duration
	ETAFraction float64
	// DeadlineMargin: a deadline_at_risk already sent is armed again
	// (sent once more, with a new id) only after the P90 start plus the
	// predicted run came back this far inside the deadline (15 min).
	DeadlineMargin time.Duration
}

// DefaultRules are issue #27's thresholds.
var DefaultRules = Rules{SoonWithin: 10 * time.Minute, SoonRearm: 30 * time.Minute, ETAMin: 15 * time.Minute, ETAFraction: 0.5, SuggestMin: 30 * time.Minute,
	DeadlineMargin: 15 * time.Minute}

// Decider turns folded records and advice into notices. It is pure: no
// clock (now is passed in), no I/O; the service calls it with the fold's
// lock held. Its state is a function of the log and the advice seen, so
// a restarted notifier decides the same notices with the same ids.
type Decider struct {
	rules  Rules
	tasks  map[string]*track
	advice map[string]*seen // the latest advice per task, and whether it is evaluated
	fresh  map[string]bool  // tasks whose advice is not evaluated yet
}

// track is what the decider remembers of one live task.
type track struct {
	attempt   int    // starts folded so far
	queuedSeq uint64 // the record that made it wait (submitted, requeued)
	soonSent  bool   // starts_soon sent in this wait (until re-armed)
	soonN     int    // starts_soon sent in this attempt
	baseline  time.Time
	alerted   bool
	suggested map[string]bool // suggestion kinds sent in this attempt
	riskSent  bool            // deadline_at_risk sent in this attempt (until re-armed)
	riskN     int             // deadline_at_risk sent in this attempt
}

type seen struct {
	adv   estimate.Advice
	fresh bool // not evaluated yet for eta_changed and alert
}

// NewDecider returns a decider with rules (zero fields: DefaultRules').
func NewDecider(r Rules) *Decider {
	d := DefaultRules
	override(&d.SoonWithin, r.SoonWithin)
	override(&d.SoonRearm, r.SoonRearm)
	override(&d.ETAMin, r.ETAMin)
	override(&d.ETAFraction, r.ETAFraction)
	override(&d.SuggestMin, r.SuggestMin)
	override(&d.DeadlineMargin, r.DeadlineMargin)
	return &Decider{rules: d, tasks: map[string]*track{}, advice: map[string]*seen{}, fresh: map[string]bool{}}
}

// override sets *dst to v when v is positive (a rule given).
func override[T int | float64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// Record folds one applied record (st already holds it) and returns the
// notices it causes. Skipped records must not be passed.
func (d *Decider) Record(st *domain.State, r events.Record) []Notice {
	switch e := r.Event.(type) {
	case events.Submitted:
		d.tasks[e.TaskID] = &track{queuedSeq: r.Seq}
	case events.Requeued:
		if tr := d.tasks[e.TaskID]; tr != nil {
			tr.queuedSeq, tr.baseline = r.Seq, time.Time{}
		}
	case events.Started:
		tr := d.tasks[e.TaskID]
		if tr == nil {
			return nil
		}
		n := d.notice(st, e.TaskID, Started, r, tr.attempt)
		n.Node = e.Node
		n.Text = sentence(fmt.Sprintf("Task %s started on %s%s", label(n.TaskName, n.Team), e.Node, attemptText(tr.attempt)))
		// The next wait, if any, is another attempt: starts_soon, the
		// baseline and the alert start over.
		*tr = track{attempt: tr.attempt + 1, queuedSeq: r.Seq}
		if s := d.advice[e.TaskID]; s != nil && s.adv.BasedOnSeq < r.Seq {
			delete(d.advice, e.TaskID) // about the wait that just ended
			delete(d.fresh, e.TaskID)
		}
		return []Notice{n}
	case events.PreemptRequested:
		tr := d.tasks[e.TaskID]
		if tr == nil {
			return nil
		}
		n := d.notice(st, e.TaskID, PreemptRequested, r, tr.attempt)
		end := recordTime(r).Add(time.Duration(e.GraceS * float64(time.Second)))
		n.GraceEnd, n.Reason, n.Preemptor = ptime(end), e.Reason, e.For
		by := ""
		if p := st.Tasks[e.For]; p != nil && e.For != "" {
			n.PreemptorClass = p.Priority.String()
			by = fmt.Sprintf(" for a %s task, %s", p.Priority, label(p.Name, p.Team))
		} else if e.Reason != "" {
			by = " (" + e.Reason + ")"
		}
		n.Text = sentence(fmt.Sprintf("Task %s is being preempted%s: it has until %s UTC (%s grace) to checkpoint and stop",
			label(n.TaskName, n.Team), by, end.UTC().Format("15:04:05"), (time.Duration(e.GraceS) * time.Second).String()))
		return []Notice{n}
	case events.Completed:
		tr := d.forget(e.TaskID)
		if tr == nil {
			return nil
		}
		n := d.notice(st, e.TaskID, Completed, r, tr.attempt-1)
		n.Node = e.Node
		ran := ""
		if t := st.Tasks[e.TaskID]; t != nil && t.RunSeconds >= 1 {
			ran = " after " + (time.Duration(t.RunSeconds) * time.Second).String() + " of running"
		}
		n.Text = sentence(fmt.Sprintf("Task %s completed on %s%s", label(n.TaskName, n.Team), e.Node, ran))
		return []Notice{n}
	case events.Failed:
		tr := d.forget(e.TaskID)
		if tr == nil {
			return nil
		}
		n := d.notice(st, e.TaskID, Failed, r, max(tr.attempt-1, 0))
		code := e.ExitCode
		n.Node, n.ExitCode, n.Error = e.Node, &code, e.Error
		why := fmt.Sprintf("with exit code %d", code)
		if e.Error != "" {
			why += ": " + e.Error
		}
		on := ""
		if e.Node != "" {
			on = " on " + e.Node
		}
		n.Text = sentence(fmt.Sprintf("Task %s failed%s %s", label(n.TaskName, n.Team), on, why))
		return []Notice{n}
	case events.Cancelled:
		d.forget(e.TaskID)
	}
	return nil
}

// forget drops a task that ended, returning what was known of it.
func (d *Decider) forget(id string) *track {
	tr := d.tasks[id]
	delete(d.tasks, id)
	delete(d.advice, id)
	delete(d.fresh, id)
	return tr
}

// Advice takes the latest advice of a task; Evaluate decides on it.
func (d *Decider) Advice(a estimate.Advice) {
	d.advice[a.TaskID] = &seen{adv: a, fresh: true}
	d.fresh[a.TaskID] = true
}

// Evaluate decides the predictive notices (starts_soon, eta_changed,
// alert, suggestion) at now, for every task with advice, in task id
// order: what time alone can change (starts_soon), at each tick.
func (d *Decider) Evaluate(st *domain.State, now time.Time) []Notice {
	return evaluateAll(d, st, now, d.advice)
}

// EvaluateFresh is Evaluate for the tasks whose advice is new since it
// was last evaluated: after each batch of records or advice, at a cost
// of the news, not of the queue.
func (d *Decider) EvaluateFresh(st *domain.State, now time.Time) []Notice {
	return evaluateAll(d, st, now, d.fresh)
}

func evaluateAll[V any](d *Decider, st *domain.State, now time.Time, set map[string]V) []Notice {
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Notice
	for _, id := range ids {
		if d.advice[id] == nil {
			delete(d.fresh, id)
			continue
		}
		out = append(out, d.evaluate(st, id, now)...)
	}
	return out
}

func (d *Decider) evaluate(st *domain.State, id string, now time.Time) []Notice {
	s := d.advice[id]
	tr, t := d.tasks[id], st.Tasks[id]
	if tr == nil || t == nil {
		if t != nil && t.State.Terminal() {
			delete(d.advice, id) // ended before its advice came
			delete(d.fresh, id)
		}
		return nil // else the fold has not seen the task yet
	}
	a := s.adv
	if a.BasedOnSeq > st.Seq {
		return nil // made on records this fold has not seen yet: once it has
	}
	// Only advice about this wait counts: the task waits in the fold,
	// the advice says so too, and it was made after the task began to
	// wait (not left over from an earlier attempt). Never after started.
	if t.State != domain.Queued || a.State != string(domain.Queued) || a.BasedOnSeq < tr.queuedSeq || a.P50Start.IsZero() {
		delete(d.fresh, id) // nothing to decide on it, now or later
		return nil
	}
	fresh := s.fresh
	s.fresh = false
	delete(d.fresh, id)
	var out []Notice
	left := a.P50Start.Sub(now)
	if tr.soonSent && left > d.rules.SoonRearm {
		tr.soonSent = false
		tr.soonN++
	}
	soon := false
	if !tr.soonSent && left <= d.rules.SoonWithin {
		soon, tr.soonSent = true, true
		n := d.adviceNotice(st, id, StartsSoon, a, tr, NoticeID(id, StartsSoon, tr.attempt, tr.soonN), now)
		n.Text = sentence(fmt.Sprintf("Task %s should start soon: P50 %s, P90 %s", label(n.TaskName, n.Team), when(a.P50Start, now), when(a.P90Start, now)))
		out = append(out, n)
		tr.baseline = a.P50Start
	}
	if !t.Deadline.IsZero() {
		out = append(out, d.deadline(st, t, a, tr, now)...)
	}
	if fresh {
		switch {
		case tr.baseline.IsZero():
			tr.baseline = a.P50Start // the first estimate: what the submitter was told
		case !soon:
			moved := a.P50Start.Sub(tr.baseline)
			wait := max(tr.baseline.Sub(now), 0)
			limit := max(d.rules.ETAMin, time.Duration(d.rules.ETAFraction*float64(wait)))
			if time.Duration(math.Abs(float64(moved))) > limit {
				n := d.adviceNotice(st, id, ETAChanged, a, tr, NoticeID(id, ETAChanged, tr.attempt, a.P50Start.Unix(), a.BasedOnSeq), now)
				n.PrevP50Start = ptime(tr.baseline)
				dir := "later"
				if moved < 0 {
					dir, moved = "earlier", -moved
				}
				n.Text = sentence(fmt.Sprintf("The start of task %s moved %s by %s: P50 now %s, P90 %s; %s",
					label(n.TaskName, n.Team), dir, human(moved), when(a.P50Start, now), when(a.P90Start, now), a.Reason))
				out = append(out, n)
				tr.baseline = a.P50Start
			}
		}
		for _, sg := range a.Suggestions {
			saves := time.Duration((a.P50WaitS - sg.P50WaitS) * float64(time.Second))
			if sg.Kind != "fewer_gpus" || sg.Never || sg.Command == "" || saves < d.rules.SuggestMin || tr.suggested[sg.Kind] {
				continue // only a what-if the policy confirms, once, when it saves enough
			}
			if tr.suggested == nil {
				tr.suggested = map[string]bool{}
			}
			tr.suggested[sg.Kind] = true
			n := d.adviceNotice(st, id, Suggestion, a, tr, NoticeID(id, Suggestion, tr.attempt, sg.Kind), now)
			n.Command, n.SavesS = sg.Command, saves.Seconds()
			n.Text = sentence(fmt.Sprintf("Task %s could start about %s sooner with fewer GPUs (P50 wait %s instead of %s): run `%s`, which keeps its place",
				label(n.TaskName, n.Team), human(saves), human(time.Duration(sg.P50WaitS*float64(time.Second))), human(time.Duration(a.P50WaitS*float64(time.Second))), sg.Command))
			out = append(out, n)
		}
		// The alert notification is the alarm: the 2× rule crossed and
		// scheduling broken (advice without a verdict: the rule alone).
		if a.Alert != "" && (a.Late == nil || a.Late.Alarm) && !tr.alerted {
			tr.alerted = true
			n := d.adviceNotice(st, id, Alert, a, tr, NoticeID(id, Alert, tr.attempt), now)
			n.Alert = a.Alert
			if a.Late != nil {
				n.Cause, n.Tell = string(a.Late.Cause), a.Late.Tell
			}
			n.Text = sentence(fmt.Sprintf("Task %s has waited more than twice its estimate: %s", label(n.TaskName, n.Team), a.Alert))
			out = append(out, n)
		}
	}
	return out
}

// deadline decides deadline_at_risk for a waiting task with a deadline:
// once its P90 start (now, if that passed) plus its predicted run ends
// after the deadline; once per attempt, armed again only when the end
// came back at least DeadlineMargin inside the deadline. Time alone can
// cause it (a P90 start that passed moves the end with the clock), so it
// is decided at every evaluation, not only on fresh advice.
func (d *Decider) deadline(st *domain.State, t *domain.Task, a estimate.Advice, tr *track, now time.Time) []Notice {
	run := time.Duration(a.RunS * float64(time.Second))
	if run <= 0 {
		// Advice from an advisor that does not say: the user's estimate
		// of what is left to run.
		run = max(time.Duration((t.Hours*3600-t.RunSeconds)*float64(time.Second)), 5*time.Second)
	}
	start := a.P90Start
	if start.Before(now) {
		start = now
	}
	end := start.Add(run)
	if tr.riskSent && !end.Add(d.rules.DeadlineMargin).After(t.Deadline) {
		tr.riskSent = false
		tr.riskN++
	}
	risk, why := estimate.DeadlineRisk(t.Deadline, a.P90Start, run, now)
	if !risk || tr.riskSent {
		return nil
	}
	tr.riskSent = true
	n := d.adviceNotice(st, t.ID, DeadlineAtRisk, a, tr, NoticeID(t.ID, DeadlineAtRisk, tr.attempt, tr.riskN), now)
	n.Deadline, n.RunS, n.P90End = ptime(t.Deadline), run.Seconds(), ptime(end)
	n.Text = sentence(fmt.Sprintf("Task %s %s", label(n.TaskName, n.Team), why))
	return []Notice{n}
}

// notice is a notice of type typ about task id caused by record r.
func (d *Decider) notice(st *domain.State, id, typ string, r events.Record, attempt int) Notice {
	n := Notice{ID: NoticeID(id, typ, r.Seq), Type: typ, TaskID: id, Seq: r.Seq, Time: recordTime(r), Attempt: attempt}
	if t := st.Tasks[id]; t != nil {
		n.TaskName, n.Team, n.notify = t.Name, t.Team, t.Notify
	}
	return n
}

// adviceNotice is a notice of type typ about task id from advice a.
func (d *Decider) adviceNotice(st *domain.State, id, typ string, a estimate.Advice, tr *track, nid string, now time.Time) Notice {
	n := Notice{ID: nid, Type: typ, TaskID: id, Seq: a.BasedOnSeq, Time: now, Attempt: tr.attempt,
		P50Start: ptime(a.P50Start), P90Start: ptime(a.P90Start), Reason: a.Reason}
	if t := st.Tasks[id]; t != nil {
		n.TaskName, n.Team, n.notify = t.Name, t.Team, t.Notify
	}
	return n
}

func attemptText(attempt int) string {
	if attempt == 0 {
		return ""
	}
	return fmt.Sprintf(" (run %d)", attempt+1)
}

// recordTime is the log's time of r (its writer's when the log has none).
func recordTime(r events.Record) time.Time {
	if r.Time.IsZero() {
		return r.Envelope.Time
	}
	return r.Time
}
