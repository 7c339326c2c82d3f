package domain

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/gpuq/gpuq/pkg/events"
)

// The indexes below are what a policy pass reads on every call. Apply keeps
// them up to date, so that a pass costs nothing for the nodes and tasks it
// does not touch; IndexesMatch recomputes every one from scratch.

// NodeTotals counts GPUs over the nodes.
type NodeTotals struct {
	// GPUs is every GPU of every node; MaxGPUs the most on one node.
	GPUs, MaxGPUs int
	// Healthy is the healthy GPUs of schedulable nodes; MaxHealthy the most
	// on one of them.
	Healthy, MaxHealthy int
}

// nodeIndex is derived from Nodes and Owner. Slices other than freeNames,
// freeLists and freeHealthy are never modified in place (a change replaces
// them), so clones share them. The free GPUs of a node are found by a
// binary search of freeNames (FreeOn), not by a map: a change costs one
// search instead of map reads and writes, a clone no map copy.
type nodeIndex struct {
	names  []string  // every node, sorted
	sums   []nodeSum // sums[i]: what the node names[i] adds to the totals
	sched  []string  // schedulable nodes with GPUs, sorted
	totals NodeTotals
	// freeNames: the schedulable nodes with healthy GPUs no task holds,
	// sorted; freeLists[i]: those GPUs of freeNames[i], in the node's
	// order (by index). Each list has cap == len, so an append by a reader
	// copies. (Both owned: Clone copies them.)
	freeNames []string
	freeLists [][]GPU
	// freeHealthy[i] is the healthy GPUs, free or held, of the node
	// freeNames[i] (owned: Clone copies it).
	freeHealthy []int
	freeCount   int
	// unhealthy counts the unhealthy GPUs of every node.
	unhealthy int
}

// buildNodeIndex computes the node index from scratch.
func buildNodeIndex(s *State) *nodeIndex {
	x := &nodeIndex{}
	x.names = make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		x.names = append(x.names, n)
	}
	sort.Strings(x.names)
	x.sums = make([]nodeSum, len(x.names))
	for i, name := range x.names {
		x.sums[i] = sumOf(s.Nodes[name])
	}
	x.nodesChanged()
	for _, n := range x.sched {
		if g := freeOf(s, s.Nodes[n]); len(g) > 0 {
			x.freeNames = append(x.freeNames, n)
			x.freeLists = append(x.freeLists, g)
			x.freeHealthy = append(x.freeHealthy, healthyOf(s.Nodes[n]))
			x.freeCount += len(g)
		}
	}
	return x
}

// nodeSum is what one node adds to the totals: its GPUs, healthy and
// unhealthy, and whether it is schedulable.
type nodeSum struct {
	gpus, healthy, unhealthy int32
	schedulable              bool
}

func sumOf(n *Node) nodeSum {
	var m nodeSum
	for _, g := range n.GPUs {
		if g.Healthy {
			m.healthy++
		} else {
			m.unhealthy++
		}
	}
	m.gpus, m.schedulable = int32(len(n.GPUs)), n.Schedulable()
	return m
}

// nodesChanged recomputes what depends on every node: the schedulable
// names and the totals (a node event; rare), from the nodes' sums (no
// node is looked up by name).
func (x *nodeIndex) nodesChanged() {
	// One allocation: an event adds at most one schedulable node.
	sched := make([]string, 0, min(len(x.sched)+1, len(x.names)))
	var tot NodeTotals
	unhealthy := 0
	for i, m := range x.sums {
		tot.GPUs += int(m.gpus)
		tot.MaxGPUs = max(tot.MaxGPUs, int(m.gpus))
		unhealthy += int(m.unhealthy)
		if !m.schedulable {
			continue
		}
		tot.Healthy += int(m.healthy)
		tot.MaxHealthy = max(tot.MaxHealthy, int(m.healthy))
		if m.gpus > 0 {
			sched = append(sched, x.names[i])
		}
	}
	if len(sched) == 0 {
		sched = nil // as before: none is nil
	}
	x.sched, x.totals, x.unhealthy = sched, tot, unhealthy
}

// freeOf lists a node's free healthy GPUs when it is schedulable, with
// cap == len.
func freeOf(s *State, n *Node) []GPU {
	if n == nil || !n.Schedulable() {
		return nil
	}
	// One owner read per GPU: the free ones of a node of up to 64 GPUs
	// are marked in a bit mask on the first walk (a bigger node reads
	// them again).
	cells := s.cellsOf(n)
	k, small := 0, len(n.GPUs) <= 64
	var mask uint64
	for i := range n.GPUs {
		if n.GPUs[i].Healthy && s.ownerAt(n, cells, i) == "" {
			k++
			if small {
				mask |= 1 << uint(i)
			}
		}
	}
	if k == 0 {
		return nil
	}
	out := make([]GPU, 0, k)
	for i := range n.GPUs {
		if small {
			if mask&(1<<uint(i)) != 0 {
				out = append(out, n.GPUs[i])
			}
		} else if n.GPUs[i].Healthy && s.ownerAt(n, cells, i) == "" {
			out = append(out, n.GPUs[i])
		}
	}
	return out
}

// healthyOf counts a node's healthy GPUs.
func healthyOf(n *Node) int {
	h := 0
	for _, g := range n.GPUs {
		if g.Healthy {
			h++
		}
	}
	return h
}

// refreshFree recomputes one node's free GPUs (and its healthy count).
func (x *nodeIndex) refreshFree(s *State, name string) {
	n := s.Nodes[name]
	g := freeOf(s, n)
	i, had := slices.BinarySearch(x.freeNames, name)
	var old []GPU
	if had {
		old = x.freeLists[i]
	}
	x.freeCount += len(g) - len(old)
	switch {
	case len(g) > 0:
		h := healthyOf(n)
		if had {
			x.freeLists[i] = g
			x.freeHealthy[i] = h
		} else {
			x.freeNames = slices.Insert(x.freeNames, i, name)
			x.freeLists = slices.Insert(x.freeLists, i, g)
			x.freeHealthy = slices.Insert(x.freeHealthy, i, h)
		}
	case had:
		x.freeNames = slices.Delete(x.freeNames, i, i+1)
		x.freeLists = slices.Delete(x.freeLists, i, i+1)
		x.freeHealthy = slices.Delete(x.freeHealthy, i, i+1)
	}
}

// clone copies what is modified in place and shares the rest.
func (x *nodeIndex) clone() *nodeIndex {
	c := *x
	c.freeNames = slices.Clone(x.freeNames)
	c.freeLists = slices.Clone(x.freeLists)
	c.freeHealthy = slices.Clone(x.freeHealthy)
	return &c
}

// nodeIndex returns the index; a state not built by NewState and Apply
// gets one computed afresh.
func (s *State) nodeIndex() *nodeIndex {
	if s.nx != nil {
		return s.nx
	}
	return buildNodeIndex(s)
}

// nodeEvent updates the index after an event about one node.
func (s *State) nodeEvent(name string) {
	if s.nx == nil {
		s.nx = buildNodeIndex(s)
		return
	}
	// names and sums are shared with clones: replaced, not modified.
	m := sumOf(s.Nodes[name])
	if i, ok := slices.BinarySearch(s.nx.names, name); !ok {
		names := make([]string, 0, len(s.nx.names)+1)
		names = append(append(append(names, s.nx.names[:i]...), name), s.nx.names[i:]...)
		sums := make([]nodeSum, 0, len(s.nx.sums)+1)
		sums = append(append(append(sums, s.nx.sums[:i]...), m), s.nx.sums[i:]...)
		s.nx.names, s.nx.sums = names, sums
	} else {
		sums := slices.Clone(s.nx.sums)
		sums[i] = m
		s.nx.sums = sums
	}
	s.nx.nodesChanged()
	s.nx.refreshFree(s, name)
}

// placementsChanged updates the free GPUs of the nodes of ps after their
// GPUs were taken or released.
func (s *State) placementsChanged(ps []events.Placement) {
	if s.nx == nil {
		s.nx = buildNodeIndex(s)
		return
	}
	for i, p := range ps {
		if !slices.ContainsFunc(ps[:i], func(q events.Placement) bool { return q.Node == p.Node }) {
			s.nx.refreshFree(s, p.Node)
		}
	}
}

// SortedNodes returns every node's name, sorted. The slice is shared: do
// not modify it.
func (s *State) SortedNodes() []string { return s.nodeIndex().names }

// SchedulableNodes returns the names of the schedulable nodes that have
// GPUs, sorted. The slice is shared: do not modify it.
func (s *State) SchedulableNodes() []string { return s.nodeIndex().sched }

// SetAway marks the nodes in away (and only those) as without a fresh
// heartbeat: not schedulable, though the log says they are up. This is
// the scheduler's live view laid over the folded one — only the
// scheduler calls it — and it reports whether anything changed.
func (s *State) SetAway(away map[string]bool) bool {
	changed := false
	for name, n := range s.Nodes {
		if a := away[name]; a != n.away {
			n.away = a
			changed = true
		}
	}
	if changed {
		s.nx = buildNodeIndex(s)
	}
	return changed
}

// FreeNodes returns the names of the schedulable nodes with free healthy
// GPUs, sorted. The slice is shared: do not modify it; it changes with the
// next Apply.
func (s *State) FreeNodes() []string { return s.nodeIndex().freeNames }

// FreeLists returns the free GPUs of the nodes of FreeNodes, in its order:
// FreeLists()[i] is FreeOn(FreeNodes()[i]). The slice and its lists are
// shared: do not modify them; the slice changes with the next Apply.
func (s *State) FreeLists() [][]GPU { return s.nodeIndex().freeLists }

// FreeHealthy returns the healthy GPUs, free or held, of the nodes of
// FreeNodes, in its order: FreeHealthy()[i] counts those of
// FreeNodes()[i]. The slice is shared: do not modify it; it changes with
// the next Apply.
func (s *State) FreeHealthy() []int { return s.nodeIndex().freeHealthy }

// FreeOn returns the healthy GPUs no task holds of a schedulable node, in
// the node's order (by index); nil for another node. The slice is shared
// and has no spare capacity: do not modify it (appending copies).
func (s *State) FreeOn(node string) []GPU {
	x := s.nodeIndex()
	if i, ok := slices.BinarySearch(x.freeNames, node); ok {
		return x.freeLists[i]
	}
	return nil
}

// FreeCount is the number of healthy GPUs no task holds on schedulable
// nodes.
func (s *State) FreeCount() int { return s.nodeIndex().freeCount }

// Totals counts the GPUs of the nodes.
func (s *State) Totals() NodeTotals { return s.nodeIndex().totals }

// teamGPUs etc.: see track.

// TeamGPUs calls fn for every team holding GPUs, with the number it holds.
func (s *State) TeamGPUs(fn func(team string, gpus int)) {
	for team, n := range s.team {
		fn(team, n)
	}
}

// EachPreempting calls fn for every task holding GPUs while yielding them
// (state Preempting), in no particular order.
func (s *State) EachPreempting(fn func(*Task)) {
	for _, t := range s.pre {
		fn(t)
	}
}

// Preempting returns the number of tasks EachPreempting visits.
func (s *State) Preempting() int { return len(s.pre) }

// Yielded returns the number of tasks in state Preempting that hold no
// GPUs: yielded, awaiting the scheduler's requeue. Zero: the scheduler's
// requeue step has nothing to do.
func (s *State) Yielded() int { return s.yielded }

// UnhealthyGPUs counts the GPUs of every node (schedulable or not) that
// their node reports unhealthy. Zero: no task holds an unhealthy GPU.
func (s *State) UnhealthyGPUs() int { return s.nodeIndex().unhealthy }

// Holders returns the number of tasks holding GPUs (EachActive visits them).
func (s *State) Holders() int { return len(s.hold) }

// Holder returns the i-th task holding GPUs, 0 <= i < Holders(), in
// EachActive's order (no order): a position stays valid until the next
// Apply. It lets a reader keep positions instead of pointers.
func (s *State) Holder(i int) *Task { return s.hold[i] }

// Victims returns the number of running tasks holding GPUs that are
// preemptible and not CRITICAL: the tasks a preemption could choose.
func (s *State) Victims() int { return s.victims }

// isVictim: see Victims.
func isVictim(t *Task) bool {
	return t.HoldsGPUs() && t.State == Running && t.Preemptible && t.Priority != Critical
}

// trackHolders keeps the team, preempting and victim indexes of one task.
func (s *State) trackHolders(t *Task) {
	if n := gpusHeld(t); n != t.held {
		if s.team == nil {
			s.team = map[string]int{}
		}
		s.team[t.Team] += n - t.held
		if s.team[t.Team] == 0 {
			delete(s.team, t.Team)
		}
		t.held = n
	}
	if pre := t.HoldsGPUs() && t.State == Preempting; pre != t.inPre {
		if s.pre == nil {
			s.pre = map[string]*Task{}
		}
		if pre {
			s.pre[t.ID] = t
		} else {
			delete(s.pre, t.ID)
		}
		t.inPre = pre
	}
	if y := t.State == Preempting && !t.HoldsGPUs(); y != t.inYielded {
		if y {
			s.yielded++
		} else {
			s.yielded--
		}
		t.inYielded = y
	}
	v := isVictim(t)
	if v != t.inVictim {
		if v {
			s.victims++
		} else {
			s.victims--
		}
	}
	if v != t.inVictim || (v && !samePlacements(t.vicPls, t.Placements)) {
		if t.inVictim {
			s.vic.add(t.vicPls, -1)
		}
		t.vicPls = nil
		if v {
			s.vic.add(t.Placements, 1)
			t.vicPls = t.Placements
		}
	}
	t.inVictim = v
}

// samePlacements reports whether a and b are the same slice (placements
// are replaced, never modified in place).
func samePlacements(a, b []events.Placement) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// victimNodes counts the GPUs the victims (State.Victims) hold on each
// node, and the nodes by that count: what a preemption search could free
// on one node, at most, with the node's free GPUs.
type victimNodes struct {
	on map[string]int
	// nodes[k] is the number of nodes where victims hold k GPUs (k ≥ 1;
	// nodes[0] unused); the last entry is not zero.
	nodes []int
}

// add counts the GPUs of ps, d = 1, or takes them off, d = -1.
func (x *victimNodes) add(ps []events.Placement, d int) {
	for _, p := range ps {
		if len(p.GPUs) == 0 {
			continue
		}
		if x.on == nil {
			x.on = map[string]int{}
		}
		was := x.on[p.Node]
		now := was + d*len(p.GPUs)
		if now == 0 {
			delete(x.on, p.Node)
		} else {
			x.on[p.Node] = now
		}
		if was > 0 {
			x.nodes[was]--
		}
		if now > 0 {
			for len(x.nodes) <= now {
				x.nodes = append(x.nodes, 0)
			}
			x.nodes[now]++
		}
		for len(x.nodes) > 0 && x.nodes[len(x.nodes)-1] == 0 {
			x.nodes = x.nodes[:len(x.nodes)-1]
		}
	}
}

func (x victimNodes) clone() victimNodes {
	return victimNodes{on: maps.Clone(x.on), nodes: slices.Clone(x.nodes)}
}

// VictimGPUsOn returns the GPUs the victims (Victims) hold on node, healthy
// or not.
func (s *State) VictimGPUsOn(node string) int { return s.vic.on[node] }

// MaxVictimGPUs returns the most GPUs the victims (Victims) hold on one
// node: VictimGPUsOn's largest value.
func (s *State) MaxVictimGPUs() int { return max(len(s.vic.nodes)-1, 0) }

func gpusHeld(t *Task) int {
	n := 0
	for _, p := range t.Placements {
		n += len(p.GPUs)
	}
	return n
}

// IndexMismatch compares every index Apply keeps with a computation from
// scratch and describes the first difference ("" when none). Tests use it.
func (s *State) IndexMismatch() string {
	// Queue index: an entry is marked stale (generation 0) iff it is not live.
	for p := range s.q.lists {
		for i, e := range s.q.lists[p] {
			if e.t != nil && (e.gen != 0) != e.live(Priority(p)) {
				return fmt.Sprintf("queue index: class %d entry %d (task %s, gen %d of %d): marked %v, live %v",
					p, i, e.t.ID, e.gen, e.t.qgen, e.gen == 0, e.live(Priority(p)))
			}
		}
	}
	want := buildNodeIndex(s)
	got := s.nx
	if got == nil {
		return "no node index"
	}
	switch {
	case !slices.Equal(want.names, got.names):
		return sprint("sorted names", want.names, got.names)
	case !slices.Equal(want.sums, got.sums):
		return sprint("node sums", want.sums, got.sums)
	case !slices.Equal(want.sched, got.sched):
		return sprint("schedulable names", want.sched, got.sched)
	case want.totals != got.totals:
		return sprint("totals", want.totals, got.totals)
	case !slices.Equal(want.freeNames, got.freeNames):
		return sprint("free nodes", want.freeNames, got.freeNames)
	case len(got.freeLists) != len(got.freeNames):
		return sprint("free lists", len(got.freeNames), len(got.freeLists))
	case !slices.Equal(want.freeHealthy, got.freeHealthy):
		return sprint("healthy GPUs of the free nodes", want.freeHealthy, got.freeHealthy)
	case want.freeCount != got.freeCount:
		return sprint("free count", want.freeCount, got.freeCount)
	case want.unhealthy != got.unhealthy:
		return sprint("unhealthy GPUs", want.unhealthy, got.unhealthy)
	}
	if m := s.ownerCellsMismatch(); m != "" {
		return m
	}
	for i, n := range want.freeNames {
		if !slices.Equal(want.freeLists[i], got.freeLists[i]) {
			return sprint("free GPUs of "+n, want.freeLists[i], got.freeLists[i])
		}
	}
	for i, g := range got.freeLists {
		if len(g) != cap(g) {
			return sprint("spare capacity of free GPUs of "+got.freeNames[i], len(g), cap(g))
		}
	}
	team := map[string]int{}
	pre := map[string]bool{}
	victims, yielded := 0, 0
	var vic victimNodes
	for _, t := range s.Tasks {
		if t.State == Preempting && !t.HoldsGPUs() {
			yielded++
		}
		if t.HoldsGPUs() {
			team[t.Team] += gpusHeld(t)
			if t.State == Preempting {
				pre[t.ID] = true
			}
		}
		if isVictim(t) {
			victims++
			vic.add(t.Placements, 1)
		}
		if t.inVictim != isVictim(t) || !samePlacements(t.vicPls, t.Placements) && t.inVictim {
			return fmt.Sprintf("victim index: %s counted %v with its placements %v, is a victim %v with %v", t.ID, t.inVictim, t.vicPls, isVictim(t), t.Placements)
		}
	}
	for k, v := range team {
		if v == 0 {
			delete(team, k)
		}
	}
	for i, t := range s.hold {
		if t.holdAt != i || !t.HoldsGPUs() || s.Tasks[t.ID] != t {
			return fmt.Sprintf("holding index: %s at %d (holdAt %d, holds %v)", t.ID, i, t.holdAt, t.HoldsGPUs())
		}
	}
	if holders := len(s.hold); holders != countHolders(s) {
		return sprint("holders", countHolders(s), holders)
	}
	gotPre := map[string]bool{}
	for id, t := range s.pre {
		if s.Tasks[id] != t {
			return "preempting index holds a task not in Tasks: " + id
		}
		gotPre[id] = true
	}
	gotTeam := map[string]int{}
	for k, v := range s.team {
		gotTeam[k] = v
	}
	switch {
	case !maps.Equal(team, gotTeam):
		return sprint("GPUs per team", team, gotTeam)
	case !maps.Equal(pre, gotPre):
		return sprint("preempting", pre, gotPre)
	case victims != s.victims:
		return sprint("victims", victims, s.victims)
	case !maps.Equal(vic.on, s.vic.on):
		return sprint("victims' GPUs per node", vic.on, s.vic.on)
	case !slices.Equal(vic.nodes, s.vic.nodes):
		return sprint("nodes by victims' GPUs", vic.nodes, s.vic.nodes)
	case yielded != s.yielded:
		return sprint("yielded", yielded, s.yielded)
	}
	return s.ends.mismatch(s)
}

func sprint(what string, want, got any) string {
	return fmt.Sprintf("%s: want %v, got %v", what, want, got)
}

func countHolders(s *State) int {
	n := 0
	for _, t := range s.Tasks {
		if t.HoldsGPUs() {
			n++
		}
	}
	return n
}
