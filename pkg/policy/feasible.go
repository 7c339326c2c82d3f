package policy

import (
	"sort"
	"strings"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// freeMap is the free, healthy GPUs of every schedulable node during a pass.
type freeMap struct {
	nodes []string                // sorted names of schedulable nodes
	free  map[string][]domain.GPU // by node, in index order
	model map[string]domain.GPU   // a representative GPU per node, for constraints
}

func newFreeMap(s *domain.State) *freeMap {
	f := &freeMap{free: map[string][]domain.GPU{}, model: map[string]domain.GPU{}}
	for _, name := range s.NodeNames() {
		n := s.Nodes[name]
		if !n.Schedulable() || len(n.GPUs) == 0 {
			continue
		}
		f.nodes = append(f.nodes, name)
		g := s.FreeGPUs(n)
		sort.Slice(g, func(i, j int) bool { return g[i].Index < g[j].Index })
		f.free[name] = g
	}
	return f
}

func (f *freeMap) take(ps []events.Placement) {
	for _, p := range ps {
		used := map[string]bool{}
		for _, g := range p.GPUs {
			used[g] = true
		}
		var rest []domain.GPU
		for _, g := range f.free[p.Node] {
			if !used[g.UUID] {
				rest = append(rest, g)
			}
		}
		f.free[p.Node] = rest
	}
}

// gpuFits reports whether one GPU satisfies the task's constraints.
func gpuFits(t *domain.Task, g domain.GPU) bool {
	if t.GPUModel != "" && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(t.GPUModel)) {
		return false
	}
	return t.MinGPUMemMiB == 0 || g.MemoryMiB >= t.MinGPUMemMiB
}

// usable returns the free GPUs of a node the task may use.
func (f *freeMap) usable(t *domain.Task, node string) []domain.GPU {
	var out []domain.GPU
	for _, g := range f.free[node] {
		if gpuFits(t, g) {
			out = append(out, g)
		}
	}
	return out
}
