package audit

import (
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// View is the queue as it was at one sequence: `gpuq replay --json`.
type View struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Tasks: the queued ones in the policy's order, each with the reason
	// it was waiting, then those dispatched, running or preempting, by
	// submission; finished tasks only with All.
	Tasks  []TaskView `json:"tasks"`
	Nodes  []NodeView `json:"nodes"`
	Digest string     `json:"digest"`
}

// TaskView is one task in a View.
type TaskView struct {
	TaskID      string    `json:"task_id"`
	Name        string    `json:"name"`
	Team        string    `json:"team"`
	Priority    string    `json:"priority"`
	GPUs        int       `json:"gpus"`
	State       string    `json:"state"`
	SubmittedAt time.Time `json:"submitted_at"`
	// Position (1-based) and Reason, Blocking: a queued task's place in
	// the policy's order and the policy's reason (policy.Reason*), with
	// the tasks it names. A task the policy would start at this point has
	// the reason "startable".
	Position   int                `json:"position,omitempty"`
	Reason     string             `json:"reason,omitempty"`
	Blocking   []string           `json:"blocking,omitempty"`
	Placements []events.Placement `json:"placements,omitempty"`
	StartedAt  *time.Time         `json:"started_at,omitempty"`
}

// NodeView is one node in a View.
type NodeView struct {
	Node      string   `json:"node"`
	State     string   `json:"state"`
	GPUs      int      `json:"gpus"`
	FreeGPUs  int      `json:"free_gpus"`
	Unhealthy []string `json:"unhealthy,omitempty"`
}

// ReasonStartable is a queued task's reason in a View when the policy
// would start it (or preempt for it) at that point: it waits only for the
// scheduler to act.
const ReasonStartable = alarm.ReasonStartable

// Replay folds the records up to and including sequence upto (0: all)
// and describes the state there. all includes finished tasks.
func Replay(recs []events.Record, pol *policy.Policy, upto uint64, all bool) View {
	f := foldTo(recs, upto)
	return describe(f, pol, all)
}

func describe(f *folder, pol *policy.Policy, all bool) View {
	st := f.st
	v := View{Seq: st.Seq, Time: st.LastTime.UTC(), Tasks: []TaskView{}, Nodes: []NodeView{}, Digest: Digest(st)}
	res := f.plan(pol)
	acting := map[string]bool{}
	for _, d := range res.Decisions {
		switch d.Kind {
		case policy.Dispatch:
			acting[d.TaskID] = true
		case policy.Preempt:
			acting[d.For] = true
		}
	}
	var queued, others []*domain.Task
	for _, t := range st.Tasks {
		switch {
		case t.State == domain.Queued:
			queued = append(queued, t)
		case !t.State.Terminal() || t.HoldsGPUs() || all:
			others = append(others, t)
		}
	}
	pos := func(t *domain.Task) int {
		if w, ok := res.Waiting[t.ID]; ok {
			return w.Position
		}
		return 1 << 30
	}
	sort.SliceStable(queued, func(i, j int) bool {
		if a, b := pos(queued[i]), pos(queued[j]); a != b {
			return a < b
		}
		return queued[i].SubmitSeq < queued[j].SubmitSeq
	})
	sort.Slice(others, func(i, j int) bool { return others[i].SubmitSeq < others[j].SubmitSeq })
	for i, t := range queued {
		tv := taskView(t)
		tv.Position = i + 1
		if w, ok := res.Waiting[t.ID]; ok && !acting[t.ID] {
			tv.Reason, tv.Blocking = w.Reason, w.Blockers
		} else {
			tv.Reason = ReasonStartable
		}
		v.Tasks = append(v.Tasks, tv)
	}
	for _, t := range others {
		tv := taskView(t)
		tv.Placements = t.Placements
		if !t.StartedAt.IsZero() {
			at := t.StartedAt.UTC()
			tv.StartedAt = &at
		}
		v.Tasks = append(v.Tasks, tv)
	}
	names := make([]string, 0, len(st.Nodes))
	for n := range st.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		n := st.Nodes[name]
		nv := NodeView{Node: name, State: string(n.State), GPUs: len(n.GPUs), FreeGPUs: len(st.FreeGPUs(n))}
		for _, g := range n.GPUs {
			if !g.Healthy {
				nv.Unhealthy = append(nv.Unhealthy, g.UUID)
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	return v
}

func taskView(t *domain.Task) TaskView {
	return TaskView{TaskID: t.ID, Name: t.Name, Team: t.Team, Priority: t.Priority.String(), GPUs: t.GPUs,
		State: string(t.State), SubmittedAt: t.SubmittedAt.UTC()}
}
