package policy

import (
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// Kind is what a decision asks for.
type Kind string

// Decision kinds.
const (
	Dispatch Kind = "dispatch"
	Preempt  Kind = "preempt"
)

// Decision is one command the caller turns into an event.
type Decision struct {
	Kind       Kind
	TaskID     string
	Placements []events.Placement // Dispatch
	For        string             // Preempt: the task the victim yields to
	Reason     string
	Backfill   bool
}

// Options configure the policy.
type Options struct{}

// Policy decides. Its zero value is the default policy.
type Policy struct {
	Opts Options
}

// New returns a policy with the given options.
func New(o Options) *Policy { return &Policy{Opts: o} }

// Input is what one pass sees.
type Input struct {
	State *domain.State
	Now   time.Time
}

// Schedule returns the decisions of one pass. It does not modify in.State.
//
//  1. Take the queued tasks in order.
//  2. For each, find a placement on free GPUs; the first task that does not
//     fit blocks every task behind it (strict order).
func (p *Policy) Schedule(in Input) []Decision {
	s := in.State
	free := newFreeMap(s)
	var out []Decision
	for _, t := range order(s) {
		ps, ok := place(t, free, s)
		if !ok {
			break
		}
		free.take(ps)
		out = append(out, Decision{Kind: Dispatch, TaskID: t.ID, Placements: ps, Reason: "placed in queue order"})
	}
	return out
}

// order returns the queued tasks in the order they are considered.
func order(s *domain.State) []*domain.Task { return s.Queued() }

// Name is the preemption policy's name, recorded in preemption events.
func (p *Policy) Name() string { return "critical-only" }
