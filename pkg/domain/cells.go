package domain

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
)

// Owner cells: State.Owner keyed by position instead of by UUID, for the
// readers that walk a node's GPUs (free GPUs, placement checks, release).
// Every GPU UUID a node reported through Apply (or a snapshot) gets a cell
// number, and each node keeps the cell of each of its GPUs (Node.cells,
// parallel to Node.GPUs); State.own[c] is the task holding the GPU of
// cell c, "" when none: always State.Owner's value for that UUID. One
// UUID has one cell, however many nodes report it, so a write through any
// of them is seen by all.
//
// Invariant (ownerCellsMismatch checks it): for every cell c of the index,
// own[c] == Owner[uuid of c]; for every node whose cells are set,
// len(cells) == len(GPUs) and cells[i] is the cell of GPUs[i].UUID. A
// state built without NewState (or whose index is nil) has no cells, and
// a node whose cells do not match its GPUs (set by hand) is read through
// Owner: both are read the old way.

// cellIndex maps a GPU UUID to its cell. It only grows, with node events;
// clones share it (shared is set), and a state adding to a shared one
// copies it first.
type cellIndex struct {
	of     map[string]int32
	shared atomic.Bool
}

func newCellIndex() *cellIndex { return &cellIndex{of: map[string]int32{}} }

// cellsOf returns the cells of n's GPUs, or nil when n is read through
// Owner.
func (s *State) cellsOf(n *Node) []int32 {
	if s.cx == nil || len(n.cells) != len(n.GPUs) || len(n.GPUs) == 0 {
		return nil
	}
	return n.cells
}

// ownerAt is Owner[n.GPUs[i].UUID].
func (s *State) ownerAt(n *Node, cells []int32, i int) string {
	if cells != nil {
		return s.own[cells[i]]
	}
	return s.Owner[n.GPUs[i].UUID]
}

// cellOf returns the cell of uuid, which n (nil: none) may report: n's
// GPUs are searched first, the index only when n lacks it; -1 when uuid
// has no cell.
func (s *State) cellOf(n *Node, uuid string) int32 {
	if s.cx == nil {
		return -1
	}
	if n != nil {
		if cells := s.cellsOf(n); cells != nil {
			for i := range n.GPUs {
				if n.GPUs[i].UUID == uuid {
					return cells[i]
				}
			}
		}
	}
	if c, ok := s.cx.of[uuid]; ok {
		return c
	}
	return -1
}

// setOwner sets Owner[uuid] = id ("" deletes it) and its cell; n is the
// node the placement names (nil: unknown).
func (s *State) setOwner(n *Node, uuid, id string) {
	if id == "" {
		delete(s.Owner, uuid)
	} else {
		s.Owner[uuid] = id
	}
	if c := s.cellOf(n, uuid); c >= 0 {
		s.own[c] = id
	}
}

// assignCells gives n's GPUs their cells, after n.GPUs was set.
func (s *State) assignCells(n *Node) {
	if s.cx == nil {
		return
	}
	cells := make([]int32, len(n.GPUs))
	for i, g := range n.GPUs {
		c, ok := s.cx.of[g.UUID]
		if !ok {
			if s.cx.shared.Load() {
				x := &cellIndex{of: maps.Clone(s.cx.of)}
				s.cx = x
			}
			c = int32(len(s.own))
			s.cx.of[g.UUID] = c
			s.own = append(s.own, s.Owner[g.UUID])
		}
		cells[i] = c
	}
	n.cells = cells
}

// buildCells computes the cells of every node from scratch (Owner known).
func (s *State) buildCells() {
	s.cx, s.own = newCellIndex(), nil
	for _, name := range slices.Sorted(maps.Keys(s.Nodes)) {
		s.assignCells(s.Nodes[name])
	}
}

// ownerCellsMismatch describes the first break of the invariant ("" when
// none).
func (s *State) ownerCellsMismatch() string {
	if s.cx == nil {
		return ""
	}
	if len(s.cx.of) != len(s.own) {
		return sprint("owner cells", len(s.cx.of), len(s.own))
	}
	for u, c := range s.cx.of {
		if s.own[c] != s.Owner[u] {
			return fmt.Sprintf("owner cell %d of %s: %q, Owner says %q", c, u, s.own[c], s.Owner[u])
		}
	}
	for name, n := range s.Nodes {
		if len(n.cells) != len(n.GPUs) {
			return fmt.Sprintf("node %s: %d cells for %d GPUs", name, len(n.cells), len(n.GPUs))
		}
		for i, g := range n.GPUs {
			if c, ok := s.cx.of[g.UUID]; !ok || c != n.cells[i] {
				return fmt.Sprintf("node %s GPU %d (%s): cell %d, index says %d (%v)", name, i, g.UUID, n.cells[i], c, ok)
			}
		}
	}
	return ""
}
