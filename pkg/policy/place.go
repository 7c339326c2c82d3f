package policy

import (
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// failure is a placement that failed in this pass: a task without
// constraints of g GPUs, allowed reserved GPUs up to end (zero: none).
type failure struct {
	g   int
	end time.Time
}

// noLater reports whether end a is no later than end b for usable; a zero
// end is the latest of all (it may use no reserved GPU).
func noLater(a, b time.Time) bool {
	switch {
	case b.IsZero():
		return true
	case a.IsZero():
		return false
	}
	return !a.After(b)
}

// place is place on the pass's free map, with failures memoized. Within a
// pass the free GPUs only shrink and the reservations only grow, and a
// task without constraints fits on one node iff some node has enough
// usable GPUs, and as a gang iff the whole free nodes and the best
// remainder give enough; usable GPUs shrink as end grows. So a failure
// for g GPUs up to end E means failure for any later task without
// constraints of the same kind (one node, or gang) with at least g GPUs
// and an end no earlier than E: such a task is refused in O(1). So is a
// task that never spans nodes when no node has as many free GPUs
// (freeMap.maxFree): place's scan would skip every node.
func (pc *pass) place(t *domain.Task, end time.Time) ([]events.Placement, bool) {
	if t.GPUModel != "" || t.MinGPUMemMiB != 0 {
		if t.GPUs > pc.free.maxFree() && t.GPUs <= pc.free.nodeSize(t, pc.s) {
			return nil, false
		}
		return place(t, pc.free, pc.s, end)
	}
	k := 0
	if t.GPUs > pc.free.maxNode {
		k = 1
	}
	for _, f := range pc.failed[k] {
		if f.g <= t.GPUs && noLater(f.end, end) {
			return nil, false
		}
	}
	if k == 0 && t.GPUs > pc.free.maxFree() {
		return nil, false // not memoized: the next such task is refused here too
	}
	ps, ok := place(t, pc.free, pc.s, end)
	if !ok {
		// Keep only failures no other one dominates.
		fs := pc.failed[k][:0]
		for _, f := range pc.failed[k] {
			if !(t.GPUs <= f.g && noLater(end, f.end)) {
				fs = append(fs, f)
			}
		}
		pc.failed[k] = append(fs, failure{t.GPUs, end})
	}
	return ps, ok
}

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
	//    Both avail and resNodes are sorted: r walks resNodes along.
	best, bestN := "", 0
	var bestGPUs []domain.GPU
	r := 0
	for i, n := range f.avail {
		gs := f.gpus[i]
		if len(gs) < t.GPUs || (best != "" && len(gs) >= bestN && bestN == t.GPUs) {
			continue
		}
		for r < len(f.resNodes) && f.resNodes[r] < n {
			r++
		}
		u := f.usableAt(t, gs, r < len(f.resNodes) && f.resNodes[r] == n, end)
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
		node    string
		gpus    []domain.GPU
		healthy int // the node's
	}
	var cands []cand
	r = 0
	for i, n := range f.avail {
		for r < len(f.resNodes) && f.resNodes[r] < n {
			r++
		}
		if u := f.usableAt(t, f.gpus[i], r < len(f.resNodes) && f.resNodes[r] == n, end); len(u) > 0 {
			cands = append(cands, cand{n, u, f.healthy[i]})
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
		if len(c.gpus) <= need && len(c.gpus) == c.healthy { // a whole node
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

func uuids(gs []domain.GPU) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.UUID
	}
	return out
}
