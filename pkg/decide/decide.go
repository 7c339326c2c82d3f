// Package decide turns the policy's decisions and the protocol's reactions
// into the events the scheduler appends, with their guards: the one pure
// step shared by the live scheduler and the simulator (gpuq sim), so both
// drive the same decisions from the same log.
package decide

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

// Liveness is what the scheduler knows of node heartbeats (not part of the
// audit log: heartbeats live in a KV bucket with a TTL).
type Liveness struct {
	LastSeen map[string]time.Time // node → last heartbeat, or the leader's term start if later
	Timeout  time.Duration        // no heartbeat for this long: lost
	// Beats holds the heartbeats themselves (node → the newest one's
	// time); when it is non-nil, a node whose newest heartbeat is older
	// than Fresh (default Timeout/2), or that has none, gets no new work
	// until it reports — a node that is silent is not dispatched to
	// while its timeout runs.
	Beats map[string]time.Time
	Fresh time.Duration
}

// away lists the nodes without a fresh heartbeat.
func (l Liveness) away(st *domain.State, now time.Time) map[string]bool {
	if l.Beats == nil || l.Timeout <= 0 {
		return nil
	}
	fresh := l.Fresh
	if fresh <= 0 {
		fresh = l.Timeout / 2
	}
	out := map[string]bool{}
	for name := range st.Nodes {
		if at, ok := l.Beats[name]; !ok || now.Sub(at) > fresh {
			out[name] = true
		}
	}
	return out
}

// Overlay lays the heartbeats over the fold: the nodes without a fresh
// one are marked away in st (domain.State.SetAway: not schedulable, though
// the log says they are up), every other node is not. The scheduler calls
// it on its state before Plan; without Beats it clears every mark. It
// reports whether a mark changed.
func (l Liveness) Overlay(st *domain.State, now time.Time) bool {
	return st.SetAway(l.away(st, now))
}

// Plan is the scheduler's pure step: protocol reactions to what happened
// (declare silent nodes lost and requeue their tasks; requeue what was
// preempted) and the policy's decisions, as events. It reads st and
// changes nothing in it: the nodes the policy may use are those st says
// are schedulable, so a caller with heartbeats lays them over st first
// (Liveness.Overlay).
//
// predict is the policy's run-time prediction (nil: the users' estimates).
func Plan(st *domain.State, p *policy.Policy, now time.Time, live Liveness, predict func(*domain.Task) time.Duration) []Command {
	var out []Command
	guard := func(t *domain.Task) *events.Expect {
		return &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq}
	}
	// 0. Nodes silent for longer than the timeout are lost; their tasks go
	//    back to the queue at their original place (from their checkpoint).
	if live.Timeout > 0 {
		lost := map[string]bool{}
		for _, name := range st.NodeNames() {
			n := st.Nodes[name]
			seen, ok := live.LastSeen[name]
			if n.State == domain.NodeLost || !ok || now.Sub(seen) <= live.Timeout {
				continue
			}
			lost[name] = true
			reason := fmt.Sprintf("no heartbeat for %s (timeout %s)", now.Sub(seen).Round(time.Second), live.Timeout)
			out = append(out, Command{Event: events.Lost{Node: name, Reason: reason, BasedOnSeq: st.Seq},
				MsgID: fmt.Sprintf("lost:%s:%d", name, st.Seq)})
		}
		if len(lost) > 0 {
			for _, t := range st.Active() {
				if t.State.Terminal() {
					continue
				}
				for _, pl := range t.Placements {
					if lost[pl.Node] {
						out = append(out, Command{
							Event:  events.Requeued{TaskID: t.ID, Reason: "node " + pl.Node + " lost", ResumeFrom: t.Checkpoint, BasedOnSeq: st.Seq, Code: events.RequeueNodeLost},
							MsgID:  fmt.Sprintf("requeue:%s:%d", t.ID, t.LastSeq),
							Expect: guard(t),
						})
						break
					}
				}
			}
			return out // decide placements once the loss is folded
		}
	}
	// 1. The protocol's reactions: requeue what yielded, preempt on drained
	//    and unhealthy GPUs (Protocol, which the advisor's forward
	//    simulation runs too).
	out = append(out, Protocol(st)...)
	// 2. The policy's decisions, on the schedulable nodes (with a fresh
	//    heartbeat, after Overlay).
	for _, d := range p.Schedule(policy.Input{State: st, Now: now, Predict: predict}) {
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
			code := events.PreemptByClass
			if d.Reclaim {
				code = events.PreemptReclaim
			}
			out = append(out, Command{
				Event: events.PreemptRequested{TaskID: t.ID, For: d.For, Policy: p.Name(), Reason: d.Reason,
					GraceS: t.GraceS, BasedOnSeq: st.Seq, Code: code},
				MsgID:  fmt.Sprintf("preempt:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		}
	}
	return out
}

// Protocol is the step of Plan that needs no clock and no heartbeats: a
// preempted task whose process is gone goes back to the queue; a node
// drained with --preempt has its preemptible tasks preempted; a task
// holding a GPU that turned unhealthy is preempted. The scheduler runs it
// in Plan; the advisor's forward simulation runs it before each of its
// passes of the policy, so that its future is the scheduler's.
func Protocol(st *domain.State) []Command {
	guard := func(t *domain.Task) *events.Expect {
		return &events.Expect{Filter: events.TaskSubjects(t.ID), LastSeq: t.LastSeq}
	}
	// 1. A preempted task whose process is gone goes back to the queue at
	//    its original place, resuming from its checkpoint.
	//    (Yielded counts them: none, and the walk over the live tasks is
	//    skipped.)
	var out []Command
	for _, t := range yielded(st) {
		if !t.HoldsGPUs() {
			out = append(out, Command{
				Event:  events.Requeued{TaskID: t.ID, Reason: PreemptedWhy(st, t), ResumeFrom: t.Checkpoint, BasedOnSeq: st.Seq, Code: events.RequeuePreempted},
				MsgID:  fmt.Sprintf("requeue:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		}
	}
	// 1b. A node drained with --preempt: its preemptible tasks are
	//     preempted politely and resume elsewhere (CRITICAL never).
	drainedPreempt := map[string]*domain.Node{}
	for name, n := range st.Nodes {
		if n.State == domain.NodeDrained && n.DrainPreempt {
			drainedPreempt[name] = n
		}
	}
	if len(drainedPreempt) > 0 {
		for _, t := range st.InState(domain.Running) {
			if !t.Preemptible || t.Priority == domain.Critical || !t.HoldsGPUs() {
				continue
			}
			for _, pl := range t.Placements {
				if n := drainedPreempt[pl.Node]; n != nil {
					reason := "node " + pl.Node + " drained"
					if n.Reason != "" {
						reason += ": " + n.Reason
					}
					out = append(out, Command{
						Event:  events.PreemptRequested{TaskID: t.ID, Policy: policy.Drain, Reason: reason, GraceS: t.GraceS, BasedOnSeq: st.Seq, Code: events.PreemptDrain},
						MsgID:  fmt.Sprintf("preempt:%s:%d", t.ID, t.LastSeq),
						Expect: guard(t),
					})
					break
				}
			}
		}
	}
	// 1c. A task holding a GPU that turned unhealthy is preempted, whatever
	//     its class: the GPU is gone; it resumes elsewhere from its last
	//     checkpoint, and the GPU is not offered again until healthy.
	//     (No GPU unhealthy, none held: the walk is skipped.)
	for _, t := range withUnhealthy(st) {
		if g, n := unhealthyHeld(st, t); g != "" {
			reason := policy.GPUUnhealthy + ": " + g + " on " + n.Name
			if n.Reason != "" {
				reason += " (" + n.Reason + ")"
			}
			out = append(out, Command{
				Event:  events.PreemptRequested{TaskID: t.ID, Policy: policy.GPUUnhealthy, Reason: reason, GraceS: t.GraceS, BasedOnSeq: st.Seq, Code: events.PreemptUnhealthy},
				MsgID:  fmt.Sprintf("preempt:%s:%d", t.ID, t.LastSeq),
				Expect: guard(t),
			})
		}
	}
	return out
}

// PreemptedWhy is a preempted task's requeue reason: what it yielded to,
// from the preemption request of this attempt only (the preemptor, its
// class and team: "preempted for <id> (critical, team vision)"; or the
// request's reason; or, with no request, why its node stopped it), then
// where it resumes ("resumes from <ref> (step N)", or "no checkpoint:
// starts over").
func PreemptedWhy(st *domain.State, t *domain.Task) string {
	why := "preempted"
	switch {
	case t.NotStarted():
		why = t.Reason
	case t.PreemptFor != "":
		why = "preempted for " + t.PreemptFor
		if p := st.Tasks[t.PreemptFor]; p != nil {
			why += fmt.Sprintf(" (%s, team %s)", p.Priority, p.Team)
		}
	case t.Reason != "":
		why = "preempted (" + t.Reason + ")"
	}
	if t.Checkpoint == "" {
		return why + "; no checkpoint: starts over"
	}
	why += "; resumes from " + t.Checkpoint
	if t.CheckpointStep != 0 {
		why += fmt.Sprintf(" (step %d)", t.CheckpointStep)
	}
	return why
}

// yielded is the tasks in state Preempting (in submit order) when some of
// them hold no GPUs, else none: step 1's candidates.
func yielded(st *domain.State) []*domain.Task {
	if st.Yielded() == 0 {
		return nil
	}
	return st.InState(domain.Preempting)
}

// withUnhealthy is the running tasks (in submit order) when some node
// reports an unhealthy GPU, else none: step 1c's candidates.
func withUnhealthy(st *domain.State) []*domain.Task {
	if st.UnhealthyGPUs() == 0 {
		return nil
	}
	return st.InState(domain.Running)
}

// unhealthyHeld returns a GPU of t that its node reports unhealthy, and
// the node ("" when none).
func unhealthyHeld(st *domain.State, t *domain.Task) (string, *domain.Node) {
	for _, pl := range t.Placements {
		n := st.Nodes[pl.Node]
		if n == nil {
			continue
		}
		for _, u := range pl.GPUs {
			for _, g := range n.GPUs {
				if !g.Healthy && g.UUID == u {
					return u, n
				}
			}
		}
	}
	return "", nil
}
