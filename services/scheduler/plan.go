package scheduler

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Command is an event the scheduler will append, with its guards.
type Command struct {
	Event  events.Event
	MsgID  string
	Expect *events.Expect
}

// Plan is the scheduler's pure step: protocol reactions to what happened
// (requeue what was preempted) and the policy's decisions, as events.
func Plan(st *domain.State, p *policy.Policy, now time.Time) []Command {
	var out []Command
	guard := func(t *domain.Task) *events.Expect {
		return &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq}
	}
	// 1. A preempted task whose process is gone goes back to the queue at
	//    its original place, resuming from its checkpoint.
	for _, t := range st.InState(domain.Preempting) {
		if !t.HoldsGPUs() {
			out = append(out, Command{
				Event:  events.Requeued{TaskID: t.ID, Reason: "preempted for " + t.PreemptFor + "; resumes from its checkpoint", ResumeFrom: t.Checkpoint},
				MsgID:  fmt.Sprintf("requeue:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		}
	}
	// 2. The policy's decisions.
	for _, d := range p.Schedule(policy.Input{State: st, Now: now}) {
		t := st.Tasks[d.TaskID]
		switch d.Kind {
		case policy.Dispatch:
			out = append(out, Command{
				Event: events.Dispatched{TaskID: t.ID, Placements: d.Placements, BasedOnSeq: st.Seq,
					ResumeFrom: t.ResumeFrom, Reason: d.Reason, Backfill: d.Backfill},
				MsgID:  fmt.Sprintf("dispatch:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		case policy.Preempt:
			out = append(out, Command{
				Event: events.PreemptRequested{TaskID: t.ID, For: d.For, Policy: p.Name(), Reason: d.Reason,
					GraceS: t.GraceS, BasedOnSeq: st.Seq},
				MsgID:  fmt.Sprintf("preempt:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		}
	}
	return out
}
