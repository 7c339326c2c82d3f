package policy

import (
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// place finds GPUs for t among the usable free ones (see freeMap.usable
// for end): a task that fits on one node goes on the fitting node with the
// fewest usable GPUs (best fit, ties by name); a larger one takes whole free
// nodes, most free first, and the remainder on the best-fitting further
// node — all or nothing (gang).
func place(t *domain.Task, f *freeMap, s *domain.State, end time.Time) ([]events.Placement, bool) {
	if t.GPUs <= 0 || f.count < t.GPUs {
		return nil, false
	}
	// 1. Best fit on one node: the fitting node with the fewest usable GPUs.
	//    (A node with fewer free GPUs than asked is skipped without a look.)
	best, bestN := "", 0
	var bestGPUs []domain.GPU
	for _, n := range f.nodes {
		if len(f.free[n]) < t.GPUs || (best != "" && len(f.free[n]) >= bestN && bestN == t.GPUs) {
			continue
		}
		u := f.usableFast(t, n, end)
		if len(u) >= t.GPUs && (best == "" || len(u) < bestN) {
			best, bestN, bestGPUs = n, len(u), u
		}
	}
	if best != "" {
		return []events.Placement{{Node: best, GPUs: uuids(bestGPUs[:t.GPUs])}}, true
	}
	// A task that fits one node (of the GPUs it may use) never spans nodes.
	if t.GPUs <= f.nodeSize(t, s) {
		return nil, false
	}
	type cand struct {
		node string
		gpus []domain.GPU
	}
	var cands []cand
	for _, n := range f.nodes {
		if len(f.free[n]) == 0 {
			continue
		}
		if u := f.usableFast(t, n, end); len(u) > 0 {
			cands = append(cands, cand{n, u})
		}
	}
	// 2. Gang across nodes: whole free nodes, most free first.
	sort.SliceStable(cands, func(i, j int) bool { return len(cands[i].gpus) > len(cands[j].gpus) })
	need := t.GPUs
	var ps []events.Placement
	used := map[int]bool{}
	for i, c := range cands {
		if need == 0 {
			break
		}
		if len(c.gpus) <= need && isWholeNode(s, c.node, len(c.gpus)) {
			ps = append(ps, events.Placement{Node: c.node, GPUs: uuids(c.gpus)})
			need -= len(c.gpus)
			used[i] = true
		}
	}
	// 3. The remainder on the best-fitting further node.
	if need > 0 {
		rem := -1
		for i, c := range cands {
			if !used[i] && len(c.gpus) >= need && (rem < 0 || len(c.gpus) < len(cands[rem].gpus)) {
				rem = i
			}
		}
		if rem < 0 {
			return nil, false
		}
		ps = append(ps, events.Placement{Node: cands[rem].node, GPUs: uuids(cands[rem].gpus[:need])})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Node < ps[j].Node })
	return ps, true
}

// isWholeNode: the free count equals the node's healthy GPUs.
func isWholeNode(s *domain.State, node string, free int) bool {
	healthy := 0
	for _, g := range s.Nodes[node].GPUs {
		if g.Healthy {
			healthy++
		}
	}
	return free == healthy
}

func uuids(gs []domain.GPU) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.UUID
	}
	return out
}
