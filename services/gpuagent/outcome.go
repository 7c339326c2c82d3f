package gpuagent

import (
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/services/gpuagent/runner"
)

// preemptedOutcome decides whether a run's end is a preemption, and with
// what reason when no request of this attempt asked for it. A job is
// preempted only if it ended after the request: the preemption signal
// reached it (this agent's, an earlier one's, or its supervisor's fence),
// its node stopped it on purpose, a GPU it held failed, or the log asks
// for the preemption and the job ended no earlier than the request. A
// job that ended by itself before the request reached the node keeps its
// own outcome (completed, failed).
func preemptedOutcome(t *domain.Task, pr *proc, res runner.Result, gpuDied bool) (preempted bool, reason string) {
	if t.State == domain.Cancelled {
		return false, ""
	}
	_, signalled := pr.p.PreemptedAt()
	requested := t.State == domain.Preempting
	switch {
	case pr.preempt || signalled || res.Stopped || gpuDied:
	case requested && (res.Ended.IsZero() || !res.Ended.Before(t.PreemptAt)):
	default:
		return false, ""
	}
	if requested {
		return true, ""
	}
	switch {
	case gpuDied:
		return true, "a GPU it held failed on node " + t.Node
	case pr.fenced:
		return true, "its agent was cut off from NATS for longer than the node timeout"
	default:
		return true, "stopped by its node (agent shut down, or gone for longer than the node timeout)"
	}
}
