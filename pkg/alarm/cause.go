package alarm

import (
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Causes of a wait, as `gpuq explain` breaks it down (audit.Explanation).
const (
	// CauseCapacity: no fitting GPUs free; the blockers are holders (those
	// the policy names: the first to end, or the victims checkpointing for
	// the task).
	CauseCapacity = "capacity"
	// CauseAhead: tasks ahead in the order (a higher class, a team under
	// its guarantee) are blocked on the GPUs first.
	CauseAhead = "ahead"
	// CauseReservation: the free GPUs that would fit are held for the
	// backfill reservation of the blockers.
	CauseReservation = "reservation"
	// CauseFragmentation: enough GPUs are free in all, but not where the
	// task fits (none on one node, or a gang that does not fit).
	CauseFragmentation = "fragmentation"
	// CauseConstraint: no GPU of the cluster meets the task's GPU model or
	// memory, or it asks for more GPUs than the cluster has.
	CauseConstraint = "constraint"
	// CauseNode: the task could run on the cluster, but not on its
	// healthy, schedulable nodes (unhealthy GPUs, drained or lost nodes).
	CauseNode = "node"
	// CausePreempted: from the task's preemption (its process stopped) to
	// its next start; the blocker is the task it yielded to.
	CausePreempted = "preempted"
	// CauseNoScheduler: the policy would have started the task (or
	// preempted for it), but no scheduler acted: no leader, or the
	// ordinary moment between a change and the leader's decision.
	CauseNoScheduler = "no-scheduler"
	// CauseStarting: dispatched, waiting for its agent to start it.
	CauseStarting = "starting"
)

// ReasonStartable is the policy reason CauseOf gives with
// CauseNoScheduler: the policy starts the task (or preempts for it) in
// this very pass.
const ReasonStartable = "startable"

// CauseOf is the policy's reason for the queued task t in res (a pass of
// the policy with reasons, policy.Options.Explain, on st), as a cause of
// its wait, with the policy's reason code and the tasks that block it.
// It is the one mapping behind `gpuq explain` and the alarm.
func CauseOf(st *domain.State, res policy.Result, t *domain.Task) (cause, reason string, blocking []string) {
	for _, d := range res.Decisions {
		if (d.Kind == policy.Dispatch && d.TaskID == t.ID) || (d.Kind == policy.Preempt && d.For == t.ID) {
			return CauseNoScheduler, ReasonStartable, []string{}
		}
	}
	w, ok := res.Waiting[t.ID]
	if !ok {
		return CauseCapacity, "", []string{}
	}
	bl := append([]string{}, w.Blockers...)
	switch w.Reason {
	case policy.ReasonHigherAhead, policy.ReasonTeamOver:
		return CauseAhead, w.Reason, bl
	case policy.ReasonReserved:
		return CauseReservation, w.Reason, bl
	case policy.ReasonUnsatisfiable:
		return CauseConstraint, w.Reason, bl
	case policy.ReasonNodesUnhealthy, policy.ReasonNodeDrained:
		return CauseNode, w.Reason, bl
	case policy.ReasonNoCapacity:
		if st.FreeCount() >= t.GPUs {
			return CauseFragmentation, w.Reason, bl
		}
	}
	return CauseCapacity, w.Reason, bl
}
