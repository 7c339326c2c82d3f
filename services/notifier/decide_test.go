package notifier

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
)

const (
	taskA = "01a23ca7-1d75-7e18-ada8-bb138e30a725"
	taskB = "01a23ca7-2d9b-7056-82f9-d8e050ec5abb"
)

// fixture folds records into a state and a decider, at a clock the steps
// move.
type fixture struct {
	t   *testing.T
	st  *domain.State
	d   *Decider
	seq uint64
	now time.Time
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, st: domain.NewState(), d: NewDecider(Rules{}), now: dt.Epoch}
	f.rec(dt.Node("n1").GPUs(8).Available())
	return f
}

func (f *fixture) rec(e events.Event) []Notice {
	f.t.Helper()
	f.seq++
	r := dt.Record(f.seq, f.now, e)
	r.Time = f.now
	if why := f.st.Apply(r); why != "" {
		f.t.Fatalf("record %d %s skipped: %s", f.seq, e.EventType(), why)
	}
	return f.d.Record(f.st, r)
}

// advise gives the decider advice for task id: P50 start p50 from now
// (P90 twice as far), made on the state as folded now.
func (f *fixture) advise(id string, p50 time.Duration, alert string) []Notice {
	return f.adviseAhead(id, p50, alert, 0, nil)
}

// adviseAhead is advise on a state ahead of the fixture's by ahead
// records (the advisor's fold ahead of the notifier's).
func (f *fixture) adviseAhead(id string, p50 time.Duration, alert string, ahead uint64, sg *estimate.Suggestion) []Notice {
	a := estimate.Advice{TaskID: id, State: string(domain.Queued), P50Start: f.now.Add(p50), P90Start: f.now.Add(2 * p50), P50WaitS: p50.Seconds(),
		BasedOnSeq: f.seq + ahead, At: f.now, Reason: "waiting for 4 GPUs", Alert: alert, Suggestions: []estimate.Suggestion{}}
	if sg != nil {
		a.Suggestions = append(a.Suggestions, *sg)
	}
	f.d.Advice(a)
	return f.d.Evaluate(f.st, f.now)
}

// step is one thing that happens: time passes (wait), a record is folded
// (ev), advice arrives (advise with p50 and alert), or the tick
// evaluates (tick).
type step struct {
	wait   time.Duration
	ev     events.Event
	advise bool
	p50    time.Duration
	alert  string
	ahead  uint64
	sg     *estimate.Suggestion
	tick   bool
}

func submitted(id string) events.Event {
	return dt.Task().ID(id).Name("train").Team("vision").GPUs(4).Submitted()
}

func fewer(wait time.Duration, never bool) *estimate.Suggestion {
	return &estimate.Suggestion{Kind: "fewer_gpus", Command: "gpuq amend " + taskA + " --gpus 2", P50WaitS: wait.Seconds(), Never: never,
		Text: "waited more than 3× its estimated run time; with 2 GPUs it would start in about 10m0s (P50). Amend keeps its place; cancel-and-resubmit would lose it"}
}

func critical(id string) events.Event {
	return dt.Task().ID(id).Name("urgent").Team("ops").Priority(domain.Critical).GPUs(8).Submitted()
}

func TestDecide(t *testing.T) {
	run := []step{{ev: dt.Dispatch(taskA, dt.On("n1", 0, 1, 2, 3))}, {ev: events.Started{TaskID: taskA, Node: "n1", PID: 7}}}
	cases := map[string]struct {
		steps []step
		want  []string
	}{
		"starts_soon once the P50 start is within 10 min, and once only": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: time.Hour}, {wait: 45 * time.Minute, advise: true, p50: 15 * time.Minute},
				{wait: 6 * time.Minute, tick: true}, {advise: true, p50: 8 * time.Minute}, {wait: time.Minute, tick: true}},
			want: []string{StartsSoon},
		},
		"a P50 start 11 min away is not soon": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 11 * time.Minute}, {tick: true}},
			want:  nil,
		},
		"no starts_soon after started, even from advice made before": {
			steps: append(append([]step{{ev: submitted(taskA)}}, run...), step{advise: true, p50: time.Minute}, step{tick: true}),
			want:  []string{Started},
		},
		"hysteresis: armed again only once the P50 start moved beyond 30 min": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 5 * time.Minute},
				{advise: true, p50: 20 * time.Minute}, // 15 min later: not beyond 15 min, and inside 30
				{advise: true, p50: 5 * time.Minute},  // no second starts_soon
				{advise: true, p50: 40 * time.Minute}, // eta_changed, armed again
				{advise: true, p50: 5 * time.Minute}}, // eta_changed is left to starts_soon
			want: []string{StartsSoon, ETAChanged, StartsSoon},
		},
		"eta_changed beyond max(15 min, half the remaining wait)": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 2 * time.Hour},
				{advise: true, p50: 2*time.Hour + 50*time.Minute}, // moved 50 min, limit 60
				{advise: true, p50: 3*time.Hour + 10*time.Minute}, // moved 70 min
				{advise: true, p50: 3*time.Hour + 20*time.Minute}, // 10 min from the last told
				{advise: true, p50: time.Hour}},                   // earlier by 2 h 10 min
			want: []string{ETAChanged, ETAChanged},
		},
		"the first estimate is the baseline, not a change": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 5 * time.Hour}},
			want:  nil,
		},
		"alert once per attempt": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: time.Hour, alert: "waited 2h, more than 2× the 1h estimated"},
				{advise: true, p50: time.Hour, alert: "waited 2h, more than 2× the 1h estimated"}},
			want: []string{Alert},
		},
		"a requeued task waits again: a new starts_soon": {
			steps: append(append([]step{{ev: submitted(taskA)}, {advise: true, p50: 5 * time.Minute}}, run...),
				step{ev: critical(taskB)},
				step{ev: events.PreemptRequested{TaskID: taskA, For: taskB, Policy: "critical-only", Reason: "critical", GraceS: 120}},
				step{ev: events.Preempted{TaskID: taskA, Node: "n1"}},
				step{ev: events.Requeued{TaskID: taskA, Reason: "preempted"}},
				step{advise: true, p50: 5 * time.Minute}),
			want: []string{StartsSoon, Started, PreemptRequested, StartsSoon},
		},
		"completed and failed end the task": {
			steps: append(append([]step{{ev: submitted(taskA)}}, run...), step{ev: events.Completed{TaskID: taskA, Node: "n1"}},
				step{advise: true, p50: time.Minute}),
			want: []string{Started, Completed},
		},
		"failed": {
			steps: append(append([]step{{ev: submitted(taskA)}}, run...), step{ev: events.Failed{TaskID: taskA, Node: "n1", ExitCode: 3, Error: "exit status 3"}}),
			want:  []string{Started, Failed},
		},
		"a what-if that saves 30 min or more, once": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 2 * time.Hour, sg: fewer(10*time.Minute, false)},
				{advise: true, p50: 2 * time.Hour, sg: fewer(5*time.Minute, false)}},
			want: []string{Suggestion},
		},
		"a what-if that saves 20 min is not worth a message": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 30 * time.Minute, sg: fewer(10*time.Minute, false)}},
			want:  nil,
		},
		"a what-if that could not start either is no suggestion": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 5 * time.Hour, sg: fewer(0, true)}},
			want:  nil,
		},
		"advice before the submission is folded waits for it": {
			steps: []step{{advise: true, p50: time.Minute, ahead: 1}, {ev: submitted(taskA)}, {tick: true}},
			want:  []string{StartsSoon},
		},
		"advice made on records this fold has not seen yet waits for them": {
			// The advisor saw the start, the preemption and the requeue;
			// its advice is about the second wait, not the first.
			steps: append(append([]step{{ev: submitted(taskA)}, {advise: true, p50: time.Minute, ahead: 6}}, run...),
				step{ev: critical(taskB)},
				step{ev: events.PreemptRequested{TaskID: taskA, For: taskB, Policy: "critical-only", Reason: "critical", GraceS: 120}},
				step{ev: events.Preempted{TaskID: taskA, Node: "n1"}},
				step{ev: events.Requeued{TaskID: taskA, Reason: "preempted"}},
				step{tick: true}),
			want: []string{Started, PreemptRequested, StartsSoon},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			var got []string
			ids := map[string]bool{}
			for _, s := range tc.steps {
				f.now = f.now.Add(s.wait)
				var ns []Notice
				switch {
				case s.ev != nil:
					ns = f.rec(s.ev)
				case s.advise:
					ns = f.adviseAhead(taskA, s.p50, s.alert, s.ahead, s.sg)
				case s.tick:
					ns = f.d.Evaluate(f.st, f.now)
				}
				for _, n := range ns {
					got = append(got, n.Type)
					if ids[n.ID] {
						t.Errorf("notice id %s twice", n.ID)
					}
					ids[n.ID] = true
					if n.Text == "" || !strings.HasSuffix(n.Text, ".") || strings.Contains(n.Text, "\n") {
						t.Errorf("%s: text %q is not one sentence", n.Type, n.Text)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("notices (-want +got):\n%s", diff)
			}
		})
	}
}

// A preemption notice says when the grace ends and for which class.
func TestDecidePreemptRequested(t *testing.T) {
	f := newFixture(t)
	f.rec(submitted(taskA))
	f.rec(dt.Dispatch(taskA, dt.On("n1", 0, 1, 2, 3)))
	f.rec(events.Started{TaskID: taskA, Node: "n1", PID: 7})
	f.rec(critical(taskB))
	ns := f.rec(events.PreemptRequested{TaskID: taskA, For: taskB, Policy: "critical-only", Reason: "critical", GraceS: 120})
	if len(ns) != 1 {
		t.Fatalf("notices %+v, want one preempt_requested", ns)
	}
	n := ns[0]
	end := f.now.Add(120 * time.Second)
	if n.GraceEnd == nil || !n.GraceEnd.Equal(end) || n.PreemptorClass != "critical" || n.Preemptor != taskB || n.Attempt != 1 {
		t.Errorf("notice %+v: want grace end %s, preemptor %s of class critical, attempt 1", n, end, taskB)
	}
	for _, w := range []string{`"train" (team vision)`, "critical task", `"urgent"`, end.Format("15:04:05"), "2m0s grace"} {
		if !strings.Contains(n.Text, w) {
			t.Errorf("text %q lacks %q", n.Text, w)
		}
	}
}

// Folding the same log again decides the same notices with the same ids:
// what lets a restarted notifier find them recorded.
func TestDecideDeterministic(t *testing.T) {
	decide := func() []Notice {
		f := newFixture(t)
		var out []Notice
		out = append(out, f.rec(submitted(taskA))...)
		out = append(out, f.advise(taskA, 5*time.Minute, "")...)
		out = append(out, f.rec(dt.Dispatch(taskA, dt.On("n1", 0)))...)
		out = append(out, f.rec(events.Started{TaskID: taskA, Node: "n1"})...)
		out = append(out, f.rec(events.Completed{TaskID: taskA, Node: "n1"})...)
		return out
	}
	a, b := decide(), decide()
	if len(a) != 3 {
		t.Fatalf("decided %d notices, want 3 (starts_soon, started, completed)", len(a))
	}
	if diff := cmp.Diff(a, b, cmp.AllowUnexported(Notice{})); diff != "" {
		t.Errorf("a second fold decided otherwise (-first +second):\n%s", diff)
	}
}

// deadline_at_risk: the task of one hour (the user's estimate: the
// advice here gives no predicted run) with a deadline at dl from the
// fixture's start; advice P50 start p50 from now, P90 twice as far.
func TestDecideDeadlineAtRisk(t *testing.T) {
	withDeadline := func(dl time.Duration) events.Event {
		return dt.Task().ID(taskA).Name("train").Team("vision").GPUs(4).Hours(1).Deadline(dt.Epoch.Add(dl)).Submitted()
	}
	run := []step{{ev: dt.Dispatch(taskA, dt.On("n1", 0, 1, 2, 3))}, {ev: events.Started{TaskID: taskA, Node: "n1", PID: 7}}}
	cases := map[string]struct {
		steps []step
		want  []string
	}{
		"safe: the P90 start plus the run ends well inside": {
			steps: []step{{ev: withDeadline(5 * time.Hour)}, {advise: true, p50: time.Hour}, {wait: time.Minute, tick: true}},
			want:  nil,
		},
		"no deadline: nothing": {
			steps: []step{{ev: submitted(taskA)}, {advise: true, p50: 10 * time.Hour}, {tick: true}},
			want:  nil,
		},
		"at risk: once, however often the advice says so": {
			steps: []step{{ev: withDeadline(150 * time.Minute)}, {advise: true, p50: time.Hour}, {advise: true, p50: time.Hour},
				{wait: time.Minute, tick: true}, {advise: true, p50: 61 * time.Minute}},
			want: []string{DeadlineAtRisk},
		},
		"not after started, even from advice made before": {
			steps: append(append([]step{{ev: withDeadline(90 * time.Minute)}}, run...), step{advise: true, p50: time.Hour}, step{tick: true}),
			want:  []string{Started},
		},
		"hysteresis: armed again only once back 15 min inside": {
			steps: []step{{ev: withDeadline(3 * time.Hour)},
				{advise: true, p50: 65 * time.Minute},  // ends 3 h 10: at risk
				{advise: true, p50: 55 * time.Minute},  // ends 2 h 50: inside by 10 min, not armed
				{advise: true, p50: 65 * time.Minute},  // at risk, still sent
				{advise: true, p50: 40 * time.Minute},  // ends 2 h 20: armed again
				{advise: true, p50: 65 * time.Minute}}, // at risk again
			want: []string{DeadlineAtRisk, DeadlineAtRisk},
		},
		"time alone: a P90 start that passed moves the end with the clock": {
			steps: []step{{ev: withDeadline(2 * time.Hour)}, {advise: true, p50: 15 * time.Minute}, // ends 1 h 30
				{wait: 45 * time.Minute, tick: true},  // starts_soon; ends 1 h 45 at the earliest
				{wait: 20 * time.Minute, tick: true}}, // ends 2 h 05
			want: []string{StartsSoon, DeadlineAtRisk},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			var got []string
			for _, s := range tc.steps {
				f.now = f.now.Add(s.wait)
				var ns []Notice
				switch {
				case s.ev != nil:
					ns = f.rec(s.ev)
				case s.advise:
					ns = f.advise(taskA, s.p50, "")
				case s.tick:
					ns = f.d.Evaluate(f.st, f.now)
				}
				for _, n := range ns {
					got = append(got, n.Type)
					if n.Type != DeadlineAtRisk {
						continue
					}
					if !strings.HasPrefix(n.Text, `Task "train" (team vision) may miss its deadline `) || !strings.Contains(n.Text, "+ about 1 h run ends") {
						t.Errorf("text %q", n.Text)
					}
					if n.Deadline == nil || n.RunS != 3600 || n.P90End == nil || !n.P90End.After(*n.Deadline) {
						t.Errorf("notice %+v: want the deadline, run_s 3600 and an end after the deadline", n)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("notices (-want +got):\n%s", diff)
			}
		})
	}
}

// The predicted run of the advice, when it gives one, is the run.
func TestDecideDeadlineUsesPredictedRun(t *testing.T) {
	f := newFixture(t)
	f.rec(dt.Task().ID(taskA).Name("train").Team("vision").GPUs(4).Hours(1).Deadline(dt.Epoch.Add(4 * time.Hour)).Submitted())
	a := estimate.Advice{TaskID: taskA, State: string(domain.Queued), P50Start: f.now.Add(time.Hour), P90Start: f.now.Add(2 * time.Hour),
		BasedOnSeq: f.seq, At: f.now, RunS: 3 * 3600, Suggestions: []estimate.Suggestion{}}
	f.d.Advice(a)
	ns := f.d.Evaluate(f.st, f.now)
	if len(ns) != 1 || ns[0].Type != DeadlineAtRisk || ns[0].RunS != 3*3600 || !strings.Contains(ns[0].Text, "about 3 h run") {
		t.Fatalf("notices %+v: want deadline_at_risk on the predicted 3 h run (the user said 1 h)", ns)
	}
}

// TestDecideAlertOnlyOnAlarm: advice past the 2× rule for a legitimate
// reason (late.alarm false) sends no alert notice; the same wait with
// scheduling broken does, once.
func TestDecideAlertOnlyOnAlarm(t *testing.T) {
	cases := map[string]struct {
		late *alarm.Verdict
		want int
	}{
		"legitimate: holders overran": {&alarm.Verdict{Reason: alarm.HoldersOverran}, 0},
		"broken: scheduler stalled":   {&alarm.Verdict{Alarm: true, Cause: alarm.SchedulerStalled, Tell: "operators"}, 1},
		"no verdict: the rule alone":  {nil, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.rec(submitted(taskA))
			a := estimate.Advice{TaskID: taskA, State: string(domain.Queued), P50Start: f.now.Add(time.Hour), P90Start: f.now.Add(2 * time.Hour),
				P50WaitS: 3600, BasedOnSeq: f.seq, At: f.now, Reason: "waiting for 4 GPUs", Alert: "waited past 2×", Late: tc.late,
				Suggestions: []estimate.Suggestion{}}
			f.d.Advice(a)
			alerts := 0
			for _, n := range f.d.Evaluate(f.st, f.now) {
				if n.Type == Alert {
					alerts++
				}
			}
			if alerts != tc.want {
				t.Errorf("alert notices %d, want %d", alerts, tc.want)
			}
		})
	}
}
