//go:build faults

package faults

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

func newID() string { return uuid.NewString() }

// doubles is what checkDoubles found in the event sequence.
type doubles struct {
	GPU    int      // a dispatch named a GPU another task held
	Task   int      // a task dispatched again while its dispatch still held GPUs
	Detail []string // the first few, for the log
}

// checkDoubles walks the log in order with its own, deliberately simple
// model of who holds which GPU — independent of pkg/domain's fold, which
// silently ignores a dispatch onto busy GPUs — and counts every dispatched
// record that claims a GPU still held by another task, or a task that
// already holds GPUs. A GPU is held from the dispatch until the task's
// process is reported gone by the node it ran on (completed, failed,
// preempted), the task is requeued, or it is cancelled before it started.
// A completion reported by a node the task is not on releases nothing.
func checkDoubles(recs []rec) doubles {
	type hold struct {
		gpus      []string
		nodes     map[string]bool
		started   bool
		cancelled bool
	}
	var d doubles
	owner := map[string]string{} // node/uuid -> task
	open := map[string]*hold{}
	submitted := map[string]bool{}
	terminal := map[string]bool{}
	release := func(id string) {
		h := open[id]
		if h == nil {
			return
		}
		for _, g := range h.gpus {
			if owner[g] == id {
				delete(owner, g)
			}
		}
		delete(open, id)
	}
	note := func(format string, a ...any) {
		if len(d.Detail) < 10 {
			d.Detail = append(d.Detail, fmt.Sprintf(format, a...))
		}
	}
	fromHolder := func(id, node string) bool {
		h := open[id]
		return h != nil && (node == "" || h.nodes[node])
	}
	for _, x := range recs {
		if x.err != nil {
			continue
		}
		switch e := x.r.Event.(type) {
		case events.Submitted:
			submitted[e.TaskID] = true
		case events.Dispatched:
			bad := false
			if open[e.TaskID] != nil {
				d.Task++
				bad = true
				note("seq %d: task %s dispatched again while its dispatch still holds GPUs", x.Seq, e.TaskID)
			}
			h := &hold{nodes: map[string]bool{}}
			for _, p := range e.Placements {
				h.nodes[p.Node] = true
				for _, g := range p.GPUs {
					k := p.Node + "/" + g
					if o := owner[k]; o != "" && o != e.TaskID {
						d.GPU++
						bad = true
						note("seq %d: task %s dispatched onto %s, held by %s", x.Seq, e.TaskID, k, o)
					}
					h.gpus = append(h.gpus, k)
				}
			}
			if bad || !submitted[e.TaskID] || terminal[e.TaskID] {
				continue // the first claim stands, as in the fold
			}
			open[e.TaskID] = h
			for _, g := range h.gpus {
				owner[g] = e.TaskID
			}
		case events.Started:
			if h := open[e.TaskID]; h != nil {
				h.started = true
			}
		case events.Completed:
			if fromHolder(e.TaskID, e.Node) {
				release(e.TaskID)
				terminal[e.TaskID] = true
			}
		case events.Failed:
			if fromHolder(e.TaskID, e.Node) {
				release(e.TaskID)
				terminal[e.TaskID] = true
			}
		case events.Preempted:
			if fromHolder(e.TaskID, e.Node) {
				release(e.TaskID)
			}
		case events.Requeued:
			release(e.TaskID)
		case events.Cancelled:
			terminal[e.TaskID] = true
			if h := open[e.TaskID]; h != nil {
				if h.started {
					h.cancelled = true
				} else {
					release(e.TaskID)
				}
			}
		case events.Lost:
			for id, h := range open {
				if h.cancelled && h.nodes[e.Node] {
					release(id)
				}
			}
		}
	}
	return d
}

// digest is a canonical hash of a fold: every task (all exported fields),
// every node, the GPU owners, the sequence and the skip/ignore counts.
// Two folds of the same log must have the same digest, whichever way they
// were reached (a full replay, a snapshot plus the tail, ten restarts).
func digest(st *domain.State) string {
	ids := make([]string, 0, len(st.Tasks))
	for id := range st.Tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tasks := make([]*domain.Task, 0, len(ids))
	for _, id := range ids {
		tasks = append(tasks, st.Tasks[id])
	}
	names := make([]string, 0, len(st.Nodes))
	for n := range st.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	nodes := make([]*domain.Node, 0, len(names))
	for _, n := range names {
		nodes = append(nodes, st.Nodes[n])
	}
	b, err := json.Marshal(struct {
		Seq              uint64
		Skipped, Ignored int
		LastTime         time.Time
		Tasks            []*domain.Task
		Nodes            []*domain.Node
		Owner            map[string]string
	}{st.Seq, st.Skipped, st.Ignored, st.LastTime.UTC(), tasks, nodes, st.Owner})
	if err != nil {
		return "unencodable: " + err.Error()
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// diffStates names the first tasks whose fields differ between two folds.
func diffStates(a, b *domain.State) []string {
	var out []string
	for id, t := range a.Tasks {
		u := b.Tasks[id]
		if u == nil {
			out = append(out, "task "+id+" missing")
		} else {
			x, _ := json.Marshal(t)
			y, _ := json.Marshal(u)
			if string(x) != string(y) {
				out = append(out, fmt.Sprintf("task %s:\n  %s\n  %s", id, x, y))
			}
		}
		if len(out) >= 3 {
			return out
		}
	}
	for id := range b.Tasks {
		if a.Tasks[id] == nil {
			out = append(out, "task "+id+" extra")
		}
	}
	if a.Seq != b.Seq || a.Skipped != b.Skipped || a.Ignored != b.Ignored || !a.LastTime.Equal(b.LastTime) {
		out = append(out, fmt.Sprintf("seq %d/%d skipped %d/%d ignored %d/%d last %s/%s", a.Seq, b.Seq, a.Skipped, b.Skipped, a.Ignored, b.Ignored, a.LastTime, b.LastTime))
	}
	return out
}

// checkStale counts decisions made from an older state than a decision
// already in the log: with one leader at a time, each pass decides from
// the state it has folded so far, and a new leader folds the whole log
// before it decides, so based_on_seq never goes down along the log. A
// decision whose based_on_seq is below an earlier decision's came from a
// leader that had not seen what its successor had — a stale leader whose
// append the log accepted.
func checkStale(recs []rec) map[uint64]string {
	var high uint64
	out := map[uint64]string{}
	for _, x := range recs {
		if x.err != nil {
			continue
		}
		var based uint64
		switch e := x.r.Event.(type) {
		case events.Dispatched:
			based = e.BasedOnSeq
		case events.PreemptRequested:
			based = e.BasedOnSeq
		default:
			continue
		}
		if based < high {
			out[x.Seq] = fmt.Sprintf("seq %d: %s of %s based on seq %d, after a decision based on seq %d", x.Seq, x.r.Event.EventType(), x.r.Event.Key(), based, high)
		}
		if based > high {
			high = based
		}
	}
	return out
}
