package estimate_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/estimate"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// T0 is the fake clock's origin: every test passes explicit times.
var T0 = dt.Epoch

// fixture folds a domaintest log into a state and feeds the estimator each
// record, as the advisor does. Run times are exact (the users' estimates)
// and no arrivals are modelled, so every estimate is a number to compare.
type fixture struct {
	st  *domain.State
	est *estimate.Estimator
	log *dt.Log
	n   int
}

func newFixture(opts policy.Options) *fixture {
	est := estimate.NewEstimator(policy.New(opts))
	est.Pred.Exact = true
	est.NoArrivals = true
	return &fixture{st: domain.NewState(), est: est, log: dt.NewLog().Step(0)}
}

// at appends events at time at and folds them.
func (f *fixture) at(at time.Time, es ...events.Event) *fixture {
	f.log.At(at).Append(es...)
	for _, r := range f.log.Records()[f.n:] {
		f.st.Apply(r)
		f.est.Observe(f.st, r)
	}
	f.n = len(f.log.Records())
	return f
}

func (f *fixture) node(b *dt.NodeBuilder) *fixture { return f.at(T0, b.Available()) }

// submit submits tasks at at.
func (f *fixture) submit(at time.Time, bs ...*dt.TaskBuilder) *fixture {
	for _, b := range bs {
		f.at(at, b.SubmittedAt(at).Submitted())
	}
	return f
}

// running submits b at at and starts it at once on p.
func (f *fixture) running(at time.Time, b *dt.TaskBuilder, p events.Placement) *fixture {
	s := b.SubmittedAt(at).Submitted()
	return f.at(at, s, dt.Dispatch(s.TaskID, p), events.Started{TaskID: s.TaskID, Node: p.Node})
}

// task is a 1-GPU, 1-hour MEDIUM task id of team "vision".
func task(id string) *dt.TaskBuilder { return dt.Task().ID(id).Name(id) }

// gpus lists the indexes from..to-1.
func gpus(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func find(t *testing.T, as []estimate.Advice, id string) estimate.Advice {
	t.Helper()
	for _, a := range as {
		if a.TaskID == id {
			return a
		}
	}
	t.Fatalf("no advice for %s in %d", id, len(as))
	return estimate.Advice{}
}

// advice is a task's advice from Advise (the advisor's whole-queue pass),
// checked against AdviseOne (the estimate request's path): both must say
// the same.
func (f *fixture) advice(t *testing.T, id string, now time.Time) estimate.Advice {
	t.Helper()
	all := find(t, f.est.Advise(f.st, now), id)
	one, ok := f.est.AdviseOne(f.st, id, now)
	if !ok {
		t.Fatalf("AdviseOne(%s): not found", id)
	}
	if diff := cmp.Diff(all, one); diff != "" {
		t.Errorf("Advise and AdviseOne disagree on %s (-Advise +AdviseOne):\n%s", id, diff)
	}
	return all
}

// Issue 5: why the task is not running now, with the blocking tasks.
func TestAdviceReasons(t *testing.T) {
	cases := []struct {
		name     string
		opts     policy.Options
		setup    func(f *fixture)
		task     string
		reason   string
		blockers []string
		position int
		method   string
		p50      time.Duration
	}{
		{
			name: "no-capacity: the holders that end first",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(4)).
					running(T0, task("r-late").GPUs(2).Hours(3).Preemptible(false), dt.On("n1", 0, 1)).
					running(T0, task("r-soon").GPUs(2).Hours(1).Preemptible(false), dt.On("n1", 2, 3)).
					submit(T0, task("q").GPUs(4))
			},
			task: "q", reason: policy.ReasonNoCapacity, blockers: []string{"r-soon", "r-late"}, position: 1,
			method: "forward-simulation", p50: 3 * time.Hour,
		},
		{
			name: "higher-priority-ahead: the blocked higher class",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(4)).
					running(T0, task("r").GPUs(4).Preemptible(false), dt.On("n1", 0, 1, 2, 3)).
					submit(T0, task("high").GPUs(4).Priority(domain.High), task("low").GPUs(2).Priority(domain.Low))
			},
			task: "low", reason: policy.ReasonHigherAhead, blockers: []string{"high"}, position: 2,
			method: "forward-simulation", p50: 2 * time.Hour,
		},
		{
			name: "team-over-guarantee: a team under its guarantee goes first",
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 2}}},
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(4)).
					running(T0, task("r").Team("ml").GPUs(4).Preemptible(false), dt.On("n1", 0, 1, 2, 3)).
					submit(T0, task("nlp-high").Team("nlp").GPUs(2).Priority(domain.High),
						task("vision-low").Team("vision").GPUs(2).Priority(domain.Low))
			},
			task: "nlp-high", reason: policy.ReasonTeamOver, blockers: []string{"vision-low"}, position: 2,
			method: "forward-simulation", p50: time.Hour,
		},
		{
			name: "reserved-for-another: free GPUs held for the head of the queue",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).
					running(T0, task("r").GPUs(6).Preemptible(false), dt.On("n1", gpus(0, 6)...)).
					submit(T0, task("head").GPUs(8), task("long").GPUs(2).Hours(2).Priority(domain.Low))
			},
			task: "long", reason: policy.ReasonReserved, blockers: []string{"head"}, position: 2,
			method: "forward-simulation", p50: 2 * time.Hour,
		},
		{
			name: "constraint-unsatisfiable: a GPU model no node has",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).submit(T0, task("q").GPUModel("B200"))
			},
			task: "q", reason: policy.ReasonUnsatisfiable, blockers: []string{}, position: 1, method: "never",
		},
		{
			name: "constraint-unsatisfiable: more GPUs than the cluster has",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).submit(T0, task("q").GPUs(16))
			},
			task: "q", reason: policy.ReasonUnsatisfiable, blockers: []string{}, position: 1, method: "never",
		},
		{
			name: "nodes-unhealthy: fits the cluster only with its unhealthy GPU",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8).Unhealthy(3)).submit(T0, task("q").GPUs(8))
			},
			task: "q", reason: policy.ReasonNodesUnhealthy, blockers: []string{}, position: 1, method: "never",
		},
		{
			name: "nodes-unhealthy: the GPU went bad after the inventory",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(4)).
					at(T0, events.Unhealthy{Node: "n1", GPUs: []string{dt.GPU("n1", 0)}, Reason: "Xid 79"}).
					submit(T0, task("q").GPUs(4))
			},
			task: "q", reason: policy.ReasonNodesUnhealthy, blockers: []string{}, position: 1, method: "never",
		},
		{
			name: "preempting-for-it: CRITICAL waits for its victim's checkpoint",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).
					running(T0, task("v").GPUs(8).Priority(domain.Low), dt.On("n1", gpus(0, 8)...)).
					submit(T0, task("crit").GPUs(8).Priority(domain.Critical))
			},
			task: "crit", reason: policy.ReasonPreempting, blockers: []string{"v"}, position: 1,
			method: "forward-simulation", p50: 2 * time.Minute, // the victim's grace (the builder's 120 s)
		},
		{
			name: "starting: it fits now",
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).submit(T0, task("q").GPUs(2))
			},
			task: "q", reason: "starting", blockers: []string{}, position: 1, method: "forward-simulation",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(tc.opts)
			tc.setup(f)
			a := f.advice(t, tc.task, T0)
			got := struct {
				Reason   string
				Blockers []string
				Position int
				Method   string
				P50      time.Duration
			}{a.Reason, a.Blockers, a.Position, a.Method, time.Duration(a.P50WaitS * float64(time.Second))}
			want := got
			want.Reason, want.Blockers, want.Position, want.Method, want.P50 = tc.reason, tc.blockers, tc.position, tc.method, tc.p50
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("advice for %s (-want +got):\n%s", tc.task, diff)
			}
		})
	}
}

// Issue 5: the waiting playbook, one item after the other as the
// checklist is marked done, then wait_calmly.
func TestAdviceActions(t *testing.T) {
	const (
		codeReview = "Review the code: check the training script for bugs, the config, and the data pipeline."
		expPlan    = "Plan the experiments: set priorities, the resources for the next runs, and a fallback plan."
		docs       = "Document: update the experiment log and archive old tasks."
		calm       = "Preparation done: wait calmly for the GPUs — stop refreshing, you will be notified."
	)
	done := func(item string) events.Event {
		return events.ChecklistUpdated{TaskID: "q", Item: item, Done: true}
	}
	undone := func(item string) events.Event {
		return events.ChecklistUpdated{TaskID: "q", Item: item, Done: false}
	}
	cases := []struct {
		name      string
		checklist []events.Event
		item      string
		text      string
	}{
		{"nothing done: code review", nil, domain.ItemCodeReview, codeReview},
		{"code review done: experiment plan", []events.Event{done(domain.ItemCodeReview)}, domain.ItemExperimentPlan, expPlan},
		{"plan done: documentation", []events.Event{done(domain.ItemCodeReview), done(domain.ItemExperimentPlan)}, domain.ItemDocumentation, docs},
		{"all three done: wait calmly", []events.Event{done(domain.ItemCodeReview), done(domain.ItemExperimentPlan), done(domain.ItemDocumentation)}, estimate.WaitCalmly, calm},
		{"out of order: the first undone item", []events.Event{done(domain.ItemDocumentation), done(domain.ItemExperimentPlan)}, domain.ItemCodeReview, codeReview},
		{"an item marked undone again comes back", []events.Event{done(domain.ItemCodeReview), done(domain.ItemExperimentPlan), done(domain.ItemDocumentation), undone(domain.ItemExperimentPlan)}, domain.ItemExperimentPlan, expPlan},
		{"an unknown item changes nothing", []events.Event{done(domain.ItemCodeReview), done("meditate")}, domain.ItemExperimentPlan, expPlan},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r").GPUs(8).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
				submit(T0, task("q"))
			f.at(T0.Add(time.Minute), tc.checklist...)
			a := f.advice(t, "q", T0.Add(2*time.Minute))
			if a.Action != tc.item || a.ActionText != tc.text {
				t.Errorf("action %q %q, want %q %q", a.Action, a.ActionText, tc.item, tc.text)
			}
			if act := estimate.NextAction(f.st.Tasks["q"]); act.Item != tc.item || act.Text != tc.text {
				t.Errorf("NextAction %+v, want %q", act, tc.item)
			}
		})
	}
}

// The progression as one task lives through it: each checklist_updated
// moves the action on, and each move is material (it is published).
func TestAdviceActionProgression(t *testing.T) {
	f := newFixture(policy.Options{})
	f.node(dt.Node("n1").GPUs(8)).
		running(T0, task("r").GPUs(8).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
		submit(T0, task("q"))
	now := T0
	prev := f.advice(t, "q", now)
	var got []string
	got = append(got, prev.Action)
	for _, item := range domain.ChecklistItems {
		now = now.Add(time.Minute)
		f.at(now, events.ChecklistUpdated{TaskID: "q", Item: item, Done: true})
		a := f.advice(t, "q", now)
		if !estimate.Material(prev, a) {
			t.Errorf("after %s: the action moved from %s to %s but Material says no", item, prev.Action, a.Action)
		}
		got = append(got, a.Action)
		prev = a
	}
	want := []string{domain.ItemCodeReview, domain.ItemExperimentPlan, domain.ItemDocumentation, estimate.WaitCalmly}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// Issue 5's mindset rules, each with its threshold's boundary.
func TestAdviceMindset(t *testing.T) {
	// Alert: q waits behind a running 8-GPU task of 1 h, so the P50 at
	// submission is 1 h; the alert comes after 2 h.
	alertSetup := func(f *fixture) {
		f.node(dt.Node("n1").GPUs(8)).
			running(T0, task("r").GPUs(8).Hours(1).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
			submit(T0, task("q").Hours(1))
	}
	// Alert from an estimate of 0: q fits the free GPUs, but nobody
	// dispatches it (the scheduler is down).
	stuckSetup := func(f *fixture) {
		f.node(dt.Node("n1").GPUs(8)).submit(T0, task("q"))
	}
	// Fewer GPUs: q asks for qGPUs for 1 h; 8-held GPUs are free, the
	// others are held 10 h (so no alert before 20 h).
	fewerSetup := func(qGPUs, held int) func(f *fixture) {
		return func(f *fixture) {
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r").GPUs(held).Hours(10).Preemptible(false), dt.On("n1", gpus(0, held)...)).
				submit(T0, task("q").GPUs(qGPUs).Hours(1))
		}
	}
	// Still needed: q of the given class behind a 10 h task on every GPU.
	lowSetup := func(p domain.Priority) func(f *fixture) {
		return func(f *fixture) {
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r").GPUs(8).Hours(10).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
				submit(T0, task("q").Priority(p).Hours(10))
		}
	}
	cases := []struct {
		name   string
		setup  func(f *fixture)
		waited time.Duration
		alert  bool
		kinds  []string
		late   string // the alarm's cause or the legitimate reason; "": not late
	}{
		{"late: just under 2× the P50 at submission", alertSetup, 2*time.Hour - time.Second, false, nil, ""},
		{"late: exactly 2× is not more", alertSetup, 2 * time.Hour, false, nil, ""},
		// The holder ran past its prediction: the 2× rule is crossed (the
		// alert says so) for a legitimate reason, a revised estimate, no
		// alarm (Late.Alarm false).
		{"late: just over 2×, the holder overran", alertSetup, 2*time.Hour + time.Second, true, nil, alarm.HoldersOverran},
		{"late: long over, the holder overran", alertSetup, 2*time.Hour + 30*time.Minute, true, nil, alarm.HoldersOverran},
		{"alert: estimated to start at once, AlertMinWait passed", stuckSetup, estimate.AlertMinWait, false, nil, ""},
		// Free GPUs and no scheduler deciding: broken.
		{"alert: estimated to start at once, just over AlertMinWait", stuckSetup, estimate.AlertMinWait + time.Second, true, nil, string(alarm.SchedulerStalled)},
		{"fewer GPUs: just under 3× its run time", fewerSetup(4, 6), 3*time.Hour - time.Second, false, nil, ""},
		{"fewer GPUs: exactly 3× is not more", fewerSetup(4, 6), 3 * time.Hour, false, nil, ""},
		{"fewer GPUs: just over 3× its run time", fewerSetup(4, 6), 3*time.Hour + time.Second, false, []string{"fewer_gpus"}, ""},
		{"fewer GPUs: none below one GPU", fewerSetup(1, 8), 3*time.Hour + time.Second, false, nil, ""},
		{"still needed: LOW just under 2 h", lowSetup(domain.Low), 2*time.Hour - time.Second, false, nil, ""},
		{"still needed: LOW exactly 2 h", lowSetup(domain.Low), 2 * time.Hour, false, nil, ""},
		{"still needed: LOW just over 2 h", lowSetup(domain.Low), 2*time.Hour + time.Second, false, []string{"still_needed"}, ""},
		{"still needed: MEDIUM over 2 h is not asked", lowSetup(domain.Medium), 2*time.Hour + time.Second, false, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			tc.setup(f)
			f.est.WatchNow(f.st, T0) // the advisor observed the queue at submission
			now := T0.Add(tc.waited)
			a := f.advice(t, "q", now)
			if got := a.Alert != ""; got != tc.alert {
				t.Errorf("alert %q, want alert %v", a.Alert, tc.alert)
			}
			late := ""
			if a.Late != nil {
				late = a.Late.Reason
				if a.Late.Alarm {
					late = string(a.Late.Cause)
				}
				if a.Alert == "" {
					t.Errorf("late %+v with alert %q", a.Late, a.Alert)
				}
			}
			if late != tc.late {
				t.Errorf("late %q (%+v), want %q", late, a.Late, tc.late)
			}
			if a.Late != nil && !a.Late.Alarm && !strings.Contains(a.Alert, "the estimate is revised") {
				t.Errorf("alert %q of a legitimate wait does not say the estimate is revised", a.Alert)
			}
			if a.Late != nil && a.Late.Alarm && (!strings.Contains(a.Alert, "scheduling is broken") || !strings.Contains(a.Alert, "tell the operators")) {
				t.Errorf("alert %q does not say scheduling is broken and whom to tell", a.Alert)
			}
			var kinds []string
			for _, s := range a.Suggestions {
				kinds = append(kinds, s.Kind)
			}
			if diff := cmp.Diff(tc.kinds, kinds); diff != "" {
				t.Fatalf("suggestions %+v (-want +got kinds):\n%s", a.Suggestions, diff)
			}
			for _, s := range a.Suggestions {
				switch s.Kind {
				case "fewer_gpus":
					// Through amend (keeps the place), with the what-if's estimate.
					wi := f.est.WhatIf(f.st, "q", 2, 0, now)
					if s.Command != "gpuq amend q --gpus 2" || s.P50WaitS != wi.P50Wait.Seconds() ||
						!strings.Contains(s.Text, "with 2 GPUs it would start at once. Amend keeps its place") {
						t.Errorf("fewer_gpus suggestion %+v; what-if %+v", s, wi)
					}
					if wi.Never || wi.P50Wait != 0 {
						t.Errorf("what-if with 2 GPUs: %+v, want a start now (2 GPUs are free)", wi)
					}
				case "still_needed":
					if !strings.Contains(s.Text, "still needed") || !strings.Contains(s.Text, "gpuq cancel q") {
						t.Errorf("still_needed suggestion %+v", s)
					}
				}
			}
		})
	}
}

// The fewer-GPUs suggestion carries the what-if's estimate when it is not
// "now", and is made only when the what-if starts the task sooner (#25):
// q asks for 4 GPUs for 1 h and has waited past 3 h.
func TestAdviceFewerGPUsWhatIfEstimate(t *testing.T) {
	cases := map[string]struct {
		r1, r2 int           // GPUs held 10 h and 4 h
		want   time.Duration // the what-if's P50; 0: no suggestion
	}{
		"sooner: 2 GPUs free when r2 ends at 4 h, 4 only at 10 h": {6, 2, time.Hour - time.Second},
		"no sooner: r2's end frees 4 GPUs at 4 h either way":      {4, 4, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r1").GPUs(tc.r1).Hours(10).Preemptible(false), dt.On("n1", gpus(0, tc.r1)...)).
				running(T0, task("r2").GPUs(tc.r2).Hours(4).Preemptible(false), dt.On("n1", gpus(tc.r1, 8)...)).
				submit(T0, task("q").GPUs(4).Hours(1))
			now := T0.Add(3*time.Hour + time.Second)
			a := f.advice(t, "q", now)
			if tc.want == 0 {
				if len(a.Suggestions) != 0 {
					t.Errorf("suggestions %+v, want none: fewer GPUs would not start it sooner", a.Suggestions)
				}
				return
			}
			if len(a.Suggestions) != 1 || a.Suggestions[0].Kind != "fewer_gpus" {
				t.Fatalf("suggestions %+v, want fewer_gpus", a.Suggestions)
			}
			s := a.Suggestions[0]
			if s.P50WaitS != tc.want.Seconds() || !strings.Contains(s.Text, "in about 1h0m0s (P50)") || s.P50WaitS >= a.P50WaitS {
				t.Errorf("suggestion %+v, want the what-if's P50 of %s, sooner than the task's %.0f s", s, tc.want, a.P50WaitS)
			}
		})
	}
}

// A task that cannot start says so first (method never, an action that
// is not the playbook) and gives the change that would let it start — a
// GPU count the policy's what-if starts — or none (#25: a drained cluster
// advised code review, then amend --gpus 4 "that would start no sooner").
// q has waited 4 h, past 3× its 1 h, where a task that can start gets the
// fewer-GPUs suggestion.
func TestAdviceNever(t *testing.T) {
	drained := events.Drained{Node: "n1", Reason: "maintenance"}
	cases := map[string]struct {
		setup   func(f *fixture)
		action  string
		reason  string
		text    string // in the action text
		command string // of the one suggestion; "": none
	}{
		"drained cluster: no change lets it start": {
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).at(T0, drained).submit(T0, task("q").GPUs(4))
			},
			action: estimate.CannotStart, reason: policy.ReasonNodeDrained, text: "No change of the request lets it start",
		},
		"half drained: 4 GPUs start at once": {
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).node(dt.Node("n2").GPUs(4)).at(T0, drained).submit(T0, task("q").GPUs(8))
			},
			action: estimate.CannotStart, reason: policy.ReasonNodeDrained, text: "with 4 GPUs it would start at once", command: "gpuq amend q --gpus 4",
		},
		"more GPUs than the cluster: the cluster's count": {
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8)).submit(T0, task("q").GPUs(12))
			},
			action: estimate.ChangeRequest, reason: policy.ReasonUnsatisfiable, text: "(gpus: the cluster has 8 GPUs in all (got 12)). Change the request: with 8 GPUs it would start at once",
			command: "gpuq amend q --gpus 8",
		},
		"a model the cluster lacks: no GPU count helps": {
			setup: func(f *fixture) {
				f.node(dt.Node("n1").GPUs(8).Model("A100")).submit(T0, task("q").GPUs(2).GPUModel("H100"))
			},
			action: estimate.ChangeRequest, reason: policy.ReasonUnsatisfiable, text: "No GPU count lets it start",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			tc.setup(f)
			a := f.advice(t, "q", T0.Add(4*time.Hour))
			if a.Method != "never" || a.Action != tc.action || a.Reason != tc.reason || !strings.HasPrefix(a.ActionText, "It cannot start") ||
				!strings.Contains(a.ActionText, tc.text) {
				t.Errorf("advice method %q action %q reason %q text %q, want never, %s, %s, %q", a.Method, a.Action, a.Reason, a.ActionText, tc.action, tc.reason, tc.text)
			}
			var cmds []string
			for _, s := range a.Suggestions {
				cmds = append(cmds, s.Command)
			}
			var want []string
			if tc.command != "" {
				want = []string{tc.command}
			}
			if diff := cmp.Diff(want, cmds); diff != "" {
				t.Errorf("suggestions %+v (-want +got commands):\n%s", a.Suggestions, diff)
			}
		})
	}
}

// The alert counter: a task that starts after more than 2× its P50 at
// submission counts once in Stats.Alerts.
func TestAlertCounter(t *testing.T) {
	cases := []struct {
		name    string
		started time.Duration
		want    int
	}{
		{"started just under 2×", 2*time.Hour - time.Second, 0},
		{"started at exactly 2×", 2 * time.Hour, 0},
		{"started just over 2×", 2*time.Hour + time.Second, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r").GPUs(8).Hours(1).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
				submit(T0, task("q").Hours(1))
			if s := f.est.Stats(); s.Alerts != 0 {
				t.Fatalf("alerts before: %d", s.Alerts)
			}
			at := T0.Add(tc.started)
			f.at(at, events.Completed{TaskID: "r", Node: "n1"}, dt.Dispatch("q", dt.On("n1", 0)), events.Started{TaskID: "q", Node: "n1"})
			if s := f.est.Stats(); s.Alerts != tc.want || s.N != 1 {
				t.Errorf("stats %+v, want %d alerts of 1 judged", s, tc.want)
			}
		})
	}
}

// Issue 5: the estimate for a task behind one running task of known
// length (exact prediction) is that task's remaining length.
func TestEstimateBehindOneRunningTaskExact(t *testing.T) {
	cases := []struct {
		name    string
		started time.Time // of the running 2 h task
		now     time.Time
		want    time.Duration
	}{
		{"just started", T0, T0, 2 * time.Hour},
		{"a quarter through", T0, T0.Add(30 * time.Minute), 90 * time.Minute},
		{"a minute left", T0, T0.Add(119 * time.Minute), time.Minute},
		{"started before the queue's task", T0.Add(-time.Hour), T0, time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			f.node(dt.Node("n1").GPUs(8)).
				running(tc.started, task("r").GPUs(8).Hours(2).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
				submit(T0, task("q").GPUs(8).Hours(5))
			e := f.est.Estimate(f.st, "q", tc.now)
			if e.Never || e.Raw != tc.want || e.P50Wait != tc.want || !e.P50Start.Equal(tc.now.Add(tc.want)) {
				t.Errorf("estimate %+v, want exactly %s", e, tc.want)
			}
			a := f.advice(t, "q", tc.now)
			if a.P50WaitS != tc.want.Seconds() || !a.P50Start.Equal(tc.now.Add(tc.want)) {
				t.Errorf("advice P50 %gs at %s, want %s", a.P50WaitS, a.P50Start, tc.want)
			}
		})
	}
}

// allFields compares every field, unexported ones included (the queue
// index, the live and holding sets).
var allFields = cmp.Exporter(func(reflect.Type) bool { return true })

// Issue 5: a what-if changes nothing. Two states folded from the same log
// must still be identical after the what-if ran on one of them.
func TestWhatIfLeavesStateUntouched(t *testing.T) {
	// q (4 GPUs, 30 min) behind big (HIGH, 8 GPUs) behind r (6 GPUs, 1 h).
	build := func() *fixture {
		f := newFixture(policy.Options{})
		f.node(dt.Node("n1").GPUs(8)).
			running(T0, task("r").GPUs(6).Hours(1).Preemptible(false), dt.On("n1", gpus(0, 6)...)).
			submit(T0, task("big").GPUs(8).Hours(1).Priority(domain.High), task("q").GPUs(4).Hours(0.5))
		return f
	}
	cases := []struct {
		name  string
		id    string
		gpus  int
		prio  domain.Priority
		never bool
		want  time.Duration
	}{
		{"unchanged", "q", 0, 0, false, 2 * time.Hour},
		{"fewer GPUs: backfilled now", "q", 2, 0, false, 0},
		{"higher class: ahead of big", "q", 0, domain.Critical, false, time.Hour},
		{"lower class: still behind big", "q", 0, domain.Low, false, 2 * time.Hour},
		{"both", "q", 2, domain.Critical, false, 0},
		{"more GPUs than the cluster", "q", 16, 0, true, 0},
		{"a running task", "r", 2, 0, true, 0},
		{"an unknown task", "nope", 2, 0, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, f := build(), build()
			if diff := cmp.Diff(before.st, f.st, allFields); diff != "" {
				t.Fatalf("two folds of one log differ:\n%s", diff)
			}
			estBefore := f.est.Estimate(f.st, "q", T0)
			subBefore, _ := f.est.AtSubmit("q")

			wi := f.est.WhatIf(f.st, tc.id, tc.gpus, tc.prio, T0)

			if wi.Never != tc.never || (!tc.never && wi.P50Wait != tc.want) {
				t.Errorf("what-if %+v, want never=%v P50 %s", wi, tc.never, tc.want)
			}
			if diff := cmp.Diff(before.st, f.st, allFields); diff != "" {
				t.Errorf("WhatIf changed the state (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(estBefore, f.est.Estimate(f.st, "q", T0)); diff != "" {
				t.Errorf("the real estimate changed after the what-if:\n%s", diff)
			}
			if sub, _ := f.est.AtSubmit("q"); sub != subBefore {
				t.Errorf("estimate at submission changed: %+v, was %+v", sub, subBefore)
			}
		})
	}
}

// Issue 5: advice is published only when it changed materially.
func TestMaterial(t *testing.T) {
	base := estimate.Advice{
		TaskID: "q", State: "queued", Position: 3, P50WaitS: 3600, P90WaitS: 7200,
		P50Start: T0.Add(time.Hour), P90Start: T0.Add(2 * time.Hour), Method: "forward-simulation",
		Reason: policy.ReasonNoCapacity, Blockers: []string{"r"}, Action: domain.ItemCodeReview, ActionText: "review",
		Suggestions: []estimate.Suggestion{}, BasedOnSeq: 10, At: T0,
	}
	with := func(f func(a *estimate.Advice)) estimate.Advice {
		a := base
		a.Blockers = append([]string(nil), base.Blockers...)
		a.Suggestions = append([]estimate.Suggestion(nil), base.Suggestions...)
		f(&a)
		return a
	}
	alerted := with(func(a *estimate.Advice) {
		a.Alert = "waited 2h0m1s, more than 2× the 1h0m0s estimated at submission: scheduling is off (no-capacity)"
	})
	suggested := with(func(a *estimate.Advice) {
		a.Suggestions = []estimate.Suggestion{{Kind: "fewer_gpus", Text: "…", P50WaitS: 60}}
	})
	cases := []struct {
		name     string
		old, new estimate.Advice
		want     bool
	}{
		{"identical", base, base, false},
		{"only the time and the sequence", base, with(func(a *estimate.Advice) { a.At, a.BasedOnSeq = T0.Add(5*time.Second), 11 }), false},
		{"only the P90", base, with(func(a *estimate.Advice) { a.P90WaitS = 9000 }), false},
		{"P50 within a minute", base, with(func(a *estimate.Advice) { a.P50WaitS = 3600 - 59 }), false},
		{"P50 over a minute but under 10%", base, with(func(a *estimate.Advice) { a.P50WaitS = 3600 + 300 }), false},
		{"P50 over a minute and 10%", base, with(func(a *estimate.Advice) { a.P50WaitS = 3600 + 361 }), true},
		{"P50 down by over 10%", base, with(func(a *estimate.Advice) { a.P50WaitS = 3000 }), true},
		{"P50 from 0 by 61 s", with(func(a *estimate.Advice) { a.P50WaitS = 0 }), with(func(a *estimate.Advice) { a.P50WaitS = 61 }), true},
		{"P50 from 0 by 59 s", with(func(a *estimate.Advice) { a.P50WaitS = 0 }), with(func(a *estimate.Advice) { a.P50WaitS = 59 }), false},
		{"position", base, with(func(a *estimate.Advice) { a.Position = 2 }), true},
		{"reason", base, with(func(a *estimate.Advice) { a.Reason = policy.ReasonHigherAhead }), true},
		{"blocking tasks", base, with(func(a *estimate.Advice) { a.Blockers = []string{"r2"} }), true},
		{"method: it can no longer start", base, with(func(a *estimate.Advice) { a.Method = "never" }), true},
		{"action", base, with(func(a *estimate.Advice) { a.Action = domain.ItemExperimentPlan }), true},
		{"state", base, with(func(a *estimate.Advice) { a.State = "running" }), true},
		{"alert raised", base, alerted, true},
		{"late for a legitimate reason", base, with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HoldersOverran, WaitS: 7201} }), true},
		{"late: the same verdict, a longer wait",
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HoldersOverran, WaitS: 7201} }),
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HoldersOverran, WaitS: 7300} }), false},
		{"late: another reason",
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HoldersOverran} }),
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HigherClass} }), true},
		{"late: now an alarm",
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Reason: alarm.HoldersOverran} }),
			with(func(a *estimate.Advice) { a.Late = &alarm.Verdict{Alarm: true, Cause: alarm.NodesLost} }), true},
		{"alert cleared", alerted, base, true},
		{"alert text only (the wait grew)", alerted, with(func(a *estimate.Advice) {
			a.Alert = "waited 2h5m0s, more than 2× the 1h0m0s estimated at submission: scheduling is off (no-capacity)"
		}), false},
		{"deadline at risk", base, with(func(a *estimate.Advice) { a.DeadlineAtRisk, a.DeadlineReason = true, "may miss its deadline …" }), true},
		{"deadline safe again", with(func(a *estimate.Advice) { a.DeadlineAtRisk = true }), base, true},
		{"deadline reason only", with(func(a *estimate.Advice) { a.DeadlineAtRisk, a.DeadlineReason = true, "a" }),
			with(func(a *estimate.Advice) { a.DeadlineAtRisk, a.DeadlineReason = true, "b" }), false},
		{"suggestion added", base, suggested, true},
		{"suggestion replaced by another kind", suggested, with(func(a *estimate.Advice) {
			a.Suggestions = []estimate.Suggestion{{Kind: "still_needed", Text: "…"}}
		}), true},
		{"suggestion text only", suggested, with(func(a *estimate.Advice) {
			a.Suggestions = []estimate.Suggestion{{Kind: "fewer_gpus", Text: "… later", P50WaitS: 90}}
		}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := estimate.Material(tc.old, tc.new); got != tc.want {
				t.Errorf("Material = %v, want %v", got, tc.want)
			}
		})
	}
}

// A task with a deadline: the advice says when the P90 start plus the
// predicted run passes it, and how; without a deadline it says nothing.
func TestAdviceDeadline(t *testing.T) {
	// One 8-GPU node held for 2 h by r; q (1 h) starts at T0+2h at the
	// earliest and ends at T0+3h.
	cases := map[string]struct {
		deadline time.Time // zero: none
		risk     bool
	}{
		"no deadline":               {},
		"deadline well after":       {deadline: T0.Add(5 * time.Hour)},
		"deadline before the end":   {deadline: T0.Add(150 * time.Minute), risk: true},
		"deadline before the start": {deadline: T0.Add(time.Hour), risk: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(policy.Options{})
			q := task("q")
			if !tc.deadline.IsZero() {
				q.Deadline(tc.deadline)
			}
			f.node(dt.Node("n1").GPUs(8)).
				running(T0, task("r").GPUs(8).Hours(2).Preemptible(false), dt.On("n1", gpus(0, 8)...)).
				submit(T0, q)
			a := f.advice(t, "q", T0.Add(time.Minute))
			if a.RunS != 3600 {
				t.Errorf("run_s %g, want 3600 (the exact predictor: the user's hour)", a.RunS)
			}
			if tc.deadline.IsZero() {
				if a.Deadline != nil || a.DeadlineAtRisk || a.DeadlineReason != "" {
					t.Fatalf("no deadline, but advice says %v %v %q", a.Deadline, a.DeadlineAtRisk, a.DeadlineReason)
				}
				return
			}
			if a.Deadline == nil || !a.Deadline.Equal(tc.deadline) {
				t.Errorf("deadline %v, want %v", a.Deadline, tc.deadline)
			}
			if a.DeadlineAtRisk != tc.risk {
				t.Fatalf("deadline_at_risk %v, want %v (P90 start %v, reason %q)", a.DeadlineAtRisk, tc.risk, a.P90Start, a.DeadlineReason)
			}
			if tc.risk && (!strings.Contains(a.DeadlineReason, "may miss its deadline") || !strings.Contains(a.DeadlineReason, "about 1 h run")) {
				t.Errorf("reason %q", a.DeadlineReason)
			}
		})
	}
}

func TestDeadlineRisk(t *testing.T) {
	now := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	dl := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		p90  time.Time
		run  time.Duration
		risk bool
		text string
	}{
		"ends before":           {p90: now.Add(time.Hour), run: time.Hour},
		"ends exactly at it":    {p90: now.Add(time.Hour), run: 2 * time.Hour},
		"ends after":            {p90: now.Add(100 * time.Minute), run: 2 * time.Hour, risk: true, text: "may miss its deadline 18:00 UTC: P90 start 16:40 UTC + about 2 h run ends 18:40 UTC"},
		"start passed: now":     {p90: now.Add(-time.Hour), run: 3*time.Hour + time.Minute, risk: true, text: "may miss its deadline 18:00 UTC: P90 start 15:00 UTC + about 3 h 1 min run ends 18:01 UTC"},
		"start passed, in time": {p90: now.Add(-time.Hour), run: 2 * time.Hour},
		"tomorrow":              {p90: now.Add(26 * time.Hour), run: time.Hour, risk: true, text: "may miss its deadline 18:00 UTC: P90 start Dec 4 17:00 UTC + about 1 h run ends Dec 4 18:00 UTC"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			risk, text := estimate.DeadlineRisk(dl, tc.p90, tc.run, now)
			if risk != tc.risk || text != tc.text {
				t.Fatalf("DeadlineRisk = %v %q, want %v %q", risk, text, tc.risk, tc.text)
			}
		})
	}
	if risk, _ := estimate.DeadlineRisk(time.Time{}, now, time.Hour, now); risk {
		t.Fatal("no deadline is never at risk")
	}
}
