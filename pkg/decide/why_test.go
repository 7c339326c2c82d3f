package decide_test

import (
	"testing"

	"github.com/gpuq/gpuq/pkg/decide"
	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
	"github.com/gpuq/gpuq/pkg/events"
)

// TestPreemptedWhy: the requeue reason names the preemptor of this
// attempt's request (its class and team) and says whether the task
// resumes from a checkpoint or starts over.
func TestPreemptedWhy(t *testing.T) {
	const (
		a    = "00000000-0000-4000-8000-00000000000a"
		crit = "00000000-0000-4000-8000-0000000000c1"
		old  = "00000000-0000-4000-8000-0000000000c0"
	)
	node := dt.Node("n1").GPUs(2).Available()
	sub := dt.Task().ID(a).Team("nlp").Priority(domain.Low).Preemptible(true).GPUs(2).Submitted()
	critSub := dt.Task().ID(crit).Team("vision").Priority(domain.Critical).GPUs(2).Submitted()
	oldSub := dt.Task().ID(old).Team("audio").Priority(domain.High).GPUs(2).Submitted()
	run := []events.Event{node, sub, critSub, oldSub, dt.Dispatch(a, dt.On("n1", 0, 1)), events.Started{TaskID: a, Node: "n1"}}
	preemptFor := func(p string) events.Event {
		return events.PreemptRequested{TaskID: a, For: p, Policy: "priority", Reason: "a critical task waits"}
	}
	ckpt := events.Checkpointed{TaskID: a, Ref: "/ckpt/a/step-120", Step: 120}
	preempted := events.Preempted{TaskID: a, Node: "n1"}
	again := []events.Event{events.Requeued{TaskID: a, Reason: "x"}, dt.Dispatch(a, dt.On("n1", 0, 1)), events.Started{TaskID: a, Node: "n1"}}
	cat := func(parts ...[]events.Event) []events.Event {
		var out []events.Event
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := map[string]struct {
		log  []events.Event
		want string
	}{
		"for a critical task, from a checkpoint with its step": {
			log:  cat(run, []events.Event{ckpt, preemptFor(crit), preempted}),
			want: "preempted for " + crit + " (critical, team vision); resumes from /ckpt/a/step-120 (step 120)",
		},
		"never checkpointed: starts over": {
			log:  cat(run, []events.Event{preemptFor(crit), preempted}),
			want: "preempted for " + crit + " (critical, team vision); no checkpoint: starts over",
		},
		"a checkpoint without a step": {
			log:  cat(run, []events.Event{events.Checkpointed{TaskID: a, Ref: "s3://b/a/7"}, preemptFor(crit), preempted}),
			want: "preempted for " + crit + " (critical, team vision); resumes from s3://b/a/7",
		},
		"a drain names its reason": {
			log:  cat(run, []events.Event{events.PreemptRequested{TaskID: a, Policy: "drain", Reason: "node n1 drained"}, preempted}),
			want: "preempted (node n1 drained); no checkpoint: starts over",
		},
		"stopped by its node after a partition: not an earlier attempt's preemptor": {
			log: cat(run, []events.Event{preemptFor(old), preempted}, again,
				[]events.Event{events.Preempted{TaskID: a, Node: "n1", Reason: "its agent was cut off from NATS for longer than the node timeout"}}),
			want: "preempted (its agent was cut off from NATS for longer than the node timeout); no checkpoint: starts over",
		},
		"the second attempt's own preemptor": {
			log:  cat(run, []events.Event{preemptFor(old), preempted}, again, []events.Event{ckpt, preemptFor(crit), preempted}),
			want: "preempted for " + crit + " (critical, team vision); resumes from /ckpt/a/step-120 (step 120)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := fold(tc.log...)
			task := st.Tasks[a]
			if task == nil || task.State != domain.Preempting {
				t.Fatalf("task not preempting: %+v", task)
			}
			if got := decide.PreemptedWhy(st, task); got != tc.want {
				t.Errorf("PreemptedWhy =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}
