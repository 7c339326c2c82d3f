package gpuagent

import (
	"maps"
	"slices"

	"github.com/gpuq/gpuq/pkg/domain"
)

// The agent's decide/act split. Under the fold's lock the agent only
// copies what its reaction reads of the folded log (see: a view); it then
// decides and acts on that copy with the lock released — appends,
// process starts, signals, the inventory's announcement — so a slow NATS
// or a slow start never holds the lock that queries and metrics take, and
// nothing of the agent keeps a pointer into the state. A view is as fresh
// as the reaction that took it, as the state was under the lock before:
// the appends that depend on the task's state are guarded by its last
// sequence (a start, a give-back), the others are idempotent by message
// id, and the next reaction sees what changed.

// view is the agent's copy of the folded log for one reaction.
type view struct {
	// tasks: deep copies of the tasks holding GPUs on this node, of the
	// tasks its runs and pending reports name, and of the tasks those
	// yield to (a task absent here is, for the agent, not in the log).
	tasks map[string]*domain.Task
	// here: the copies of the tasks holding GPUs with a placement on
	// this node, by submission (domain.State.Active's order).
	here []*domain.Task
	// node: this node as the log has it (nil: not known yet).
	node *domain.Node
	// held: this node's GPUs (UUIDs) a task holds in the log.
	held map[string]bool
}

// see takes the view under the fold's lock; it reads st and the agent's
// own runs and reports, and changes neither.
func (a *Agent) see(st *domain.State) *view {
	v := &view{tasks: map[string]*domain.Task{}, held: map[string]bool{}}
	add := func(id string) {
		if _, ok := v.tasks[id]; ok {
			return
		}
		if t := st.Tasks[id]; t != nil {
			v.tasks[id] = t.Clone()
		}
	}
	for _, t := range st.Active() {
		pl, _, ok := a.mine(t)
		if !ok {
			continue
		}
		add(t.ID)
		v.here = append(v.here, v.tasks[t.ID])
		for _, g := range pl.GPUs {
			v.held[g] = true
		}
	}
	for _, pr := range a.procs {
		add(pr.task)
	}
	for _, r := range a.pending {
		add(r.task)
	}
	for _, id := range slices.Sorted(maps.Keys(v.tasks)) {
		if p := v.tasks[id].PreemptFor; p != "" {
			add(p)
		}
	}
	if n := st.Nodes[a.cfg.Node]; n != nil {
		c := *n
		c.GPUs = slices.Clone(n.GPUs)
		v.node = &c
	}
	return v
}

// task is the view's copy of the task id (nil: not in the view).
func (v *view) task(id string) *domain.Task {
	if v == nil {
		return nil
	}
	return v.tasks[id]
}
