package domain

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpuq/gpuq/pkg/events"
)

// The map-based computations the owner cells replaced (cells.go), kept as
// the reference the cell-based ones must equal.

// freeOfRef is freeOf reading Owner by UUID.
func freeOfRef(s *State, n *Node) []GPU {
	if n == nil || !n.Schedulable() {
		return nil
	}
	var out []GPU
	for _, g := range n.GPUs {
		if g.Healthy && s.Owner[g.UUID] == "" {
			out = append(out, g)
		}
	}
	return out
}

// canPlaceRef is canPlace reading Owner by UUID.
func canPlaceRef(s *State, ps []events.Placement) bool {
	if len(ps) == 0 {
		return false
	}
	total := 0
	for _, p := range ps {
		n := s.Nodes[p.Node]
		if n == nil || len(p.GPUs) == 0 {
			return false
		}
		for _, g := range p.GPUs {
			has := false
			for _, x := range n.GPUs {
				if x.UUID == g {
					has = true
					break
				}
			}
			if s.Owner[g] != "" || !has {
				return false
			}
		}
		total += len(p.GPUs)
	}
	return !repeats(ps, total)
}

// OwnerSlotsMismatch checks that every node's owner slots say what Owner
// says, and that freeOf and FreeGPUs equal their map-based references
// ("" when all do).
func (s *State) OwnerSlotsMismatch() string {
	if s.cx == nil {
		return "no owner cells"
	}
	if m := s.ownerCellsMismatch(); m != "" {
		return m
	}
	for _, name := range slices.Sorted(maps.Keys(s.Nodes)) {
		n := s.Nodes[name]
		cells := s.cellsOf(n)
		if cells == nil && len(n.GPUs) > 0 {
			return "node " + name + " has no owner cells"
		}
		for i, g := range n.GPUs {
			if got, want := s.own[cells[i]], s.Owner[g.UUID]; got != want {
				return fmt.Sprintf("node %s GPU %d (%s): slot %q, Owner %q", name, i, g.UUID, got, want)
			}
		}
		if got, want := freeOf(s, n), freeOfRef(s, n); !slices.Equal(got, want) {
			return sprint("freeOf "+name, want, got)
		}
		want := freeOfRef(s, &Node{State: NodeUp, GPUs: n.GPUs})
		if got := s.FreeGPUs(n); !slices.Equal(got, want) {
			return sprint("FreeGPUs "+name, want, got)
		}
	}
	return ""
}

// CanPlaceMismatch compares canPlace with its reference.
func (s *State) CanPlaceMismatch(ps []events.Placement) string {
	if got, want := s.canPlace(ps), canPlaceRef(s, ps); got != want {
		return sprint(fmt.Sprintf("canPlace(%v)", ps), want, got)
	}
	return ""
}

// OwnerSlots returns every node's slots (the owner of each GPU, by
// position) and a copy of the cell values.
func (s *State) OwnerSlots() (map[string][]string, []string) {
	out := map[string][]string{}
	for name, n := range s.Nodes {
		cells := s.cellsOf(n)
		for i := range n.GPUs {
			out[name] = append(out[name], s.ownerAt(n, cells, i))
		}
	}
	return out, slices.Clone(s.own)
}

// FreeOnMismatch compares FreeOn of every node (and of one not known)
// with freeOfRef, computed afresh from Owner (holds while no UUID is on
// two nodes: see TestPropOwnerCells).
func (s *State) FreeOnMismatch() string {
	for _, name := range append(slices.Sorted(maps.Keys(s.Nodes)), "ghost") {
		want := freeOfRef(s, s.Nodes[name])
		got := s.FreeOn(name)
		if !slices.Equal(want, got) || len(got) != cap(got) || (len(want) == 0) != (got == nil) {
			return sprint("FreeOn("+name+")", want, got)
		}
	}
	return ""
}

// nodesChangedRef is nodesChanged as it was, reading every node by name.
func nodesChangedRef(s *State, names []string) (sched []string, tot NodeTotals, unhealthy int) {
	for _, name := range names {
		n := s.Nodes[name]
		tot.GPUs += len(n.GPUs)
		tot.MaxGPUs = max(tot.MaxGPUs, len(n.GPUs))
		for _, g := range n.GPUs {
			if !g.Healthy {
				unhealthy++
			}
		}
		if !n.Schedulable() {
			continue
		}
		h := 0
		for _, g := range n.GPUs {
			if g.Healthy {
				h++
			}
		}
		tot.Healthy += h
		tot.MaxHealthy = max(tot.MaxHealthy, h)
		if len(n.GPUs) > 0 {
			sched = append(sched, name)
		}
	}
	return sched, tot, unhealthy
}

// NodeTotalsMismatch compares the index's schedulable names, totals and
// unhealthy count with nodesChangedRef over every node.
func (s *State) NodeTotalsMismatch() string {
	names := slices.Sorted(maps.Keys(s.Nodes))
	sched, tot, unhealthy := nodesChangedRef(s, names)
	x := s.nx
	switch {
	case !slices.Equal(names, x.names):
		return sprint("names", names, x.names)
	case !slices.Equal(sched, x.sched):
		return sprint("schedulable", sched, x.sched)
	case tot != x.totals:
		return sprint("totals", tot, x.totals)
	case unhealthy != x.unhealthy:
		return sprint("unhealthy", unhealthy, x.unhealthy)
	}
	return ""
}
