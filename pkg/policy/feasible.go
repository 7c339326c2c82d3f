package policy

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// freeMap is the free, healthy GPUs of every schedulable node during a pass,
// and the GPUs reserved for blocked tasks. It starts from the fold's
// indexes (domain.State.FreeOn) and shares their slices: a GPU list is
// never modified in place, only replaced (take and add build new ones), so
// clones share the lists too.
type freeMap struct {
	nodes []string                // sorted names of schedulable nodes with GPUs (the state's, read-only)
	free  map[string][]domain.GPU // nodes with free GPUs, in index order
	avail []string                // sorted names of the nodes in free
	count int
	// maxNode is the most healthy GPUs of any schedulable node: a task
	// asking for no more fits one node and never spans nodes.
	maxNode int
	// reserved GPUs may only be used by a task predicted to end by the
	// time given (the reservation's start); zero time: not at all.
	reserved map[string]time.Time
}

// newFreeMap reads the fold's free-GPU index: it costs the nodes with free
// GPUs, not every node and GPU.
func newFreeMap(s *domain.State) *freeMap {
	names := s.FreeNodes()
	f := &freeMap{nodes: s.SchedulableNodes(), free: make(map[string][]domain.GPU, len(names)),
		avail: append([]string(nil), names...), count: s.FreeCount(), maxNode: s.Totals().MaxHealthy,
		reserved: map[string]time.Time{}}
	for _, n := range names {
		f.free[n] = s.FreeOn(n)
	}
	return f
}

// scratchFreeMap builds the free map from every node and GPU owner, as
// newFreeMap did before the fold kept the index (tests: Policy.scratch).
func scratchFreeMap(s *domain.State) *freeMap {
	f := &freeMap{free: map[string][]domain.GPU{}, reserved: map[string]time.Time{}}
	names := s.NodeNames()
	for _, name := range names {
		n := s.Nodes[name]
		if !n.Schedulable() || len(n.GPUs) == 0 {
			continue
		}
		f.nodes = append(f.nodes, name)
		var g []domain.GPU
		healthy := 0
		for _, x := range n.GPUs {
			if x.Healthy {
				healthy++
				if s.Owner[x.UUID] == "" {
					g = append(g, x)
				}
			}
		}
		if len(g) > 0 {
			if !sort.SliceIsSorted(g, func(i, j int) bool { return g[i].Index < g[j].Index }) {
				sort.Slice(g, func(i, j int) bool { return g[i].Index < g[j].Index })
			}
			f.free[name] = g[:len(g):len(g)]
			f.avail = append(f.avail, name)
			f.count += len(g)
		}
		f.maxNode = max(f.maxNode, healthy)
	}
	return f
}

// clone copies the free GPUs (not the reservations); the lists are shared.
func (f *freeMap) clone() *freeMap {
	c := &freeMap{nodes: f.nodes, free: make(map[string][]domain.GPU, len(f.free)),
		avail: append([]string(nil), f.avail...), count: f.count, maxNode: f.maxNode, reserved: map[string]time.Time{}}
	for n, g := range f.free {
		c.free[n] = g
	}
	return c
}

// cloneReserved copies the free GPUs and the reservations.
func (f *freeMap) cloneReserved() *freeMap {
	c := f.clone()
	for g, at := range f.reserved {
		c.reserved[g] = at
	}
	return c
}

// add returns GPUs to the map (a what-if: a task ends or is preempted).
func (f *freeMap) add(s *domain.State, ps []events.Placement) {
	for _, p := range ps {
		n := s.Nodes[p.Node]
		if n == nil || !n.Schedulable() {
			continue
		}
		cur := f.free[p.Node]
		had := len(cur)
		var out []domain.GPU // a copy: the lists are shared with clones
		for _, g := range n.GPUs {
			if g.Healthy && slices.Contains(p.GPUs, g.UUID) {
				if out == nil {
					out = make([]domain.GPU, had, had+len(p.GPUs))
					copy(out, cur)
				}
				out = append(out, g)
			}
		}
		if out == nil {
			continue
		}
		f.count += len(out) - had
		if !slices.IsSortedFunc(out, byIndex) {
			slices.SortFunc(out, byIndex)
		}
		f.free[p.Node] = out
		if had == 0 {
			i := sort.SearchStrings(f.avail, p.Node)
			f.avail = append(f.avail, "")
			copy(f.avail[i+1:], f.avail[i:])
			f.avail[i] = p.Node
		}
	}
}

// byIndex orders a node's GPUs (indexes are unique on a node).
func byIndex(a, b domain.GPU) int { return a.Index - b.Index }

func (f *freeMap) take(ps []events.Placement) {
	for _, p := range ps {
		used := map[string]bool{}
		for _, g := range p.GPUs {
			used[g] = true
		}
		rest := f.free[p.Node][:0:0]
		for _, g := range f.free[p.Node] {
			if !used[g.UUID] {
				rest = append(rest, g)
			}
		}
		f.count -= len(f.free[p.Node]) - len(rest)
		if len(rest) > 0 {
			f.free[p.Node] = rest
			continue
		}
		if _, ok := f.free[p.Node]; ok {
			delete(f.free, p.Node)
			if i := sort.SearchStrings(f.avail, p.Node); i < len(f.avail) && f.avail[i] == p.Node {
				f.avail = append(f.avail[:i], f.avail[i+1:]...)
			}
		}
	}
}

// gpuFits reports whether one GPU satisfies the task's constraints.
func gpuFits(t *domain.Task, g domain.GPU) bool {
	if t.GPUModel != "" && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(t.GPUModel)) {
		return false
	}
	return t.MinGPUMemMiB == 0 || g.MemoryMiB >= t.MinGPUMemMiB
}

// usable returns the free GPUs of a node the task may use: fitting its
// constraints, and either unreserved or reserved from a time after end
// (end zero: no reserved GPU at all).
func (f *freeMap) usable(t *domain.Task, node string, end time.Time) []domain.GPU {
	var out []domain.GPU
	for _, g := range f.free[node] {
		if !gpuFits(t, g) {
			continue
		}
		if r, ok := f.reserved[g.UUID]; ok && (end.IsZero() || r.IsZero() || end.After(r)) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// nodeSize is the most healthy GPUs fitting t's constraints on one
// schedulable node.
func (f *freeMap) nodeSize(t *domain.Task, s *domain.State) int {
	if t.GPUModel == "" && t.MinGPUMemMiB == 0 {
		return f.maxNode
	}
	best := 0
	for _, name := range f.nodes {
		k := 0
		for _, g := range s.Nodes[name].GPUs {
			if g.Healthy && gpuFits(t, g) {
				k++
			}
		}
		if k > best {
			best = k
		}
	}
	return best
}

// usableFast is usable without a copy when nothing filters: no
// constraints and no reservations (the common case).
func (f *freeMap) usableFast(t *domain.Task, node string, end time.Time) []domain.GPU {
	if t.GPUModel == "" && t.MinGPUMemMiB == 0 && len(f.reserved) == 0 {
		return f.free[node]
	}
	return f.usable(t, node, end)
}

// capacity answers "could this task ever run here": on all nodes that exist
// (ever), and on healthy GPUs of schedulable nodes (now).
type capacity struct {
	s     *domain.State
	cache map[capKey][4]int // ever total, ever best node, now total, now best node
	// scratch (tests): count the GPUs without constraints too, rather
	// than read the fold's totals.
	scratch bool
}

type capKey struct {
	model string
	mem   int
}

func (c *capacity) feasible(t *domain.Task) (ever, now bool) {
	k := capKey{t.GPUModel, t.MinGPUMemMiB}
	var v [4]int
	ok := false
	if k == (capKey{}) && !c.scratch {
		// Without constraints: the fold's totals.
		n := c.s.Totals()
		v, ok = [4]int{n.GPUs, n.MaxGPUs, n.Healthy, n.MaxHealthy}, true
	} else {
		v, ok = c.cache[k]
	}
	if !ok {
		v[0], v[1] = c.count(t, false)
		v[2], v[3] = c.count(t, true)
		c.cache[k] = v
	}
	return v[1] >= t.GPUs || v[0] >= t.GPUs, v[3] >= t.GPUs || v[2] >= t.GPUs
}

// count sums the GPUs fitting t's constraints, and the most on one node.
func (c *capacity) count(t *domain.Task, healthyOnly bool) (total, best int) {
	for _, n := range c.s.Nodes {
		if healthyOnly && !n.Schedulable() {
			continue
		}
		k := 0
		for _, g := range n.GPUs {
			if (g.Healthy || !healthyOnly) && gpuFits(t, g) {
				k++
			}
		}
		total += k
		if k > best {
			best = k
		}
	}
	return total, best
}
