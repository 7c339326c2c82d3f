package policy

import (
	"math"
	"slices"
	"strings"
	"sync"
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
	nodes []string // sorted names of schedulable nodes with GPUs (the state's, read-only)
	// avail is the sorted names of the nodes with free GPUs, and gpus
	// their free GPUs in index order (gpus[i] is avail[i]'s): slices, not
	// a map, so that a placement's scan of the nodes reads them in order.
	avail []string
	gpus  [][]domain.GPU
	// healthy[i] is the healthy GPUs, free or held, of avail[i]'s node
	// (domain.State.FreeHealthy): its free GPUs are the whole node when
	// len(gpus[i]) == healthy[i].
	healthy []int
	count   int
	// maxNode is the most healthy GPUs of any schedulable node: a task
	// asking for no more fits one node and never spans nodes.
	maxNode int
	// lens counts the lists in gpus by length, the last entry those of
	// len(lens)-1 GPUs or more; maxLen is maxFree once computed from them
	// (0: not yet, or not since they changed).
	lens   [17]int
	maxLen int
	// reserved GPUs may only be used by a task predicted to end by the
	// time given (the reservation's start); zero time: not at all.
	// Written only by reserve, which keeps resNodes.
	reserved map[string]time.Time
	// resNodes is the sorted names of the nodes with a GPU in reserved
	// (the node of the placement that reserved it; a GPU UUID names one
	// GPU of one node, as the fold's Owner index assumes): a node not in
	// it has no reserved GPU, so its usable GPUs need no lookup in
	// reserved (usableAt). A pass reserves GPUs on a few nodes only.
	resNodes []string
	// bufs is where avail and gpus came from, if from the pool; used is
	// the most entries they ever held (release clears those).
	bufs *freeBufs
	used int
	// arena, when set, is where add cuts the lists it builds: the map is
	// private to one walk (pass.reserve's future), so its lists die with it.
	arena *gpuArena
}

// gpuArena hands out the GPU lists of a what-if map private to one walk
// (freeMap.arena), cut from pooled chunks rather than allocated one by
// one. A cut list's capacity is its length, so nobody appends into the
// next; release clears every cut entry before the chunks go back, so no
// GPU outlives the walk and a pass stays a function of its input.
type gpuArena struct {
	chunks [][]domain.GPU // each cut from its start; chunks[k] is being cut
	k      int
}

// arenaChunk is a chunk's size in GPUs (a walk returning 64 placements of
// 8 GPUs fills one).
const arenaChunk = 512

var arenaPool = sync.Pool{New: func() any { return new(gpuArena) }}

// alloc returns an empty list with room for n GPUs, cut from the arena.
func (a *gpuArena) alloc(n int) []domain.GPU {
	for {
		if a.k < len(a.chunks) {
			c := a.chunks[a.k]
			if l := len(c); cap(c)-l >= n {
				a.chunks[a.k] = c[:l+n]
				return c[l : l : l+n]
			}
			if a.k+1 < len(a.chunks) {
				a.k++
				continue
			}
		}
		a.chunks = append(a.chunks, make([]domain.GPU, 0, max(arenaChunk, n)))
		a.k = len(a.chunks) - 1
	}
}

// release clears what was cut and returns the arena to the pool.
func (a *gpuArena) release() {
	for i, c := range a.chunks {
		clear(c)
		a.chunks[i] = c[:0]
	}
	a.k = 0
	arenaPool.Put(a)
}

// freeBufs are the outer slices of a free map (avail and gpus), pooled
// across passes. They point to names and GPU lists that nobody modifies,
// and release clears every entry before they go back, so a pass stays a
// function of its input.
type freeBufs struct {
	avail   []string
	gpus    [][]domain.GPU
	healthy []int
}

var freeBufPool = sync.Pool{New: func() any { return new(freeBufs) }}

// pooled gives f empty outer slices from the pool, with room for n nodes.
func (f *freeMap) pooled(n int) {
	b := freeBufPool.Get().(*freeBufs)
	f.bufs = b
	f.avail = slices.Grow(b.avail[:0], n)
	f.gpus = slices.Grow(b.gpus[:0], n)
	f.healthy = slices.Grow(b.healthy[:0], n)
}

// release clears f's outer slices and returns them to the pool (if they
// came from it); f is not used after.
func (f *freeMap) release() {
	b := f.bufs
	if b == nil {
		return
	}
	// Entries are only appended or shifted left within the length, so
	// none was ever written past the most the slices held.
	clear(f.avail[:f.used])
	clear(f.gpus[:f.used])
	b.avail, b.gpus, b.healthy = f.avail[:0], f.gpus[:0], f.healthy[:0]
	f.bufs, f.avail, f.gpus, f.healthy = nil, nil, nil, nil
	freeBufPool.Put(b)
	if f.arena != nil {
		f.arena.release()
		f.arena = nil
	}
}

// at returns the position of node in avail, and whether it is there.
func (f *freeMap) at(node string) (int, bool) {
	return slices.BinarySearch(f.avail, node)
}

// on returns the free GPUs of a node (nil: none).
func (f *freeMap) on(node string) []domain.GPU {
	if i, ok := f.at(node); ok {
		return f.gpus[i]
	}
	return nil
}

// set replaces the free GPUs of a node (none: it leaves avail); a node not
// in avail enters it with h healthy GPUs.
func (f *freeMap) set(node string, gs []domain.GPU, h int) {
	i, ok := f.at(node)
	switch {
	case ok && len(gs) > 0:
		f.replace(i, gs)
	case ok:
		f.tally(len(f.gpus[i]), -1)
		f.avail = append(f.avail[:i], f.avail[i+1:]...)
		f.gpus = append(f.gpus[:i], f.gpus[i+1:]...)
		f.healthy = append(f.healthy[:i], f.healthy[i+1:]...)
	case len(gs) > 0:
		f.insert(i, node, gs, h)
	}
}

// insert enters a node not in avail at its position i, with its free GPUs
// gs (not empty) and h healthy GPUs.
func (f *freeMap) insert(i int, node string, gs []domain.GPU, h int) {
	f.avail = append(f.avail, "")
	copy(f.avail[i+1:], f.avail[i:])
	f.avail[i] = node
	f.gpus = append(f.gpus, nil)
	copy(f.gpus[i+1:], f.gpus[i:])
	f.gpus[i] = gs
	f.healthy = slices.Insert(f.healthy, i, h)
	f.tally(len(gs), 1)
	f.used = max(f.used, len(f.avail))
}

// replace replaces the free GPUs of avail[i] by gs, not empty.
func (f *freeMap) replace(i int, gs []domain.GPU) {
	f.tally(len(f.gpus[i]), -1)
	f.gpus[i] = gs
	f.tally(len(gs), 1)
}

// tally counts d lists of n GPUs in lens.
func (f *freeMap) tally(n, d int) {
	f.lens[min(n, len(f.lens)-1)] += d
	f.maxLen = 0
}

// maxFree bounds the free GPUs of any node from above: exact up to
// len(lens)-2, else unbounded.
func (f *freeMap) maxFree() int {
	if f.maxLen > 0 {
		return f.maxLen
	}
	if f.lens[len(f.lens)-1] > 0 {
		f.maxLen = math.MaxInt
		return f.maxLen
	}
	for n := len(f.lens) - 2; n > 0; n-- {
		if f.lens[n] > 0 {
			f.maxLen = n
			return n
		}
	}
	return 0
}

// newFreeMap reads the fold's free-GPU index: it costs the nodes with free
// GPUs, not every node and GPU. Its outer slices are pooled: release them.
func newFreeMap(s *domain.State) *freeMap {
	names, lists := s.FreeNodes(), s.FreeLists()
	f := &freeMap{nodes: s.SchedulableNodes(), maxNode: s.Totals().MaxHealthy, reserved: map[string]time.Time{}}
	f.pooled(len(names))
	f.avail = append(f.avail, names...)
	f.gpus = append(f.gpus, lists...)
	f.healthy = append(f.healthy, s.FreeHealthy()...)
	f.used = len(names)
	for _, gs := range lists {
		f.count += len(gs)
		f.tally(len(gs), 1)
	}
	return f
}

// clone copies the free GPUs (not the reservations); the lists are shared.
// The copy's outer slices are pooled: release them when done.
func (f *freeMap) clone() *freeMap {
	c := &freeMap{nodes: f.nodes, count: f.count, maxNode: f.maxNode, lens: f.lens, maxLen: f.maxLen, reserved: map[string]time.Time{}}
	c.pooled(len(f.avail))
	c.avail = append(c.avail, f.avail...)
	c.gpus = append(c.gpus, f.gpus...)
	c.healthy = append(c.healthy, f.healthy...)
	c.used = len(c.avail)
	return c
}

// cloneUnheld is clone less the GPUs reserved from the zero time (held
// for good in this pass, for preemptors), which no what-if for another
// task may count: as taking each such GPU from the clone, node by node,
// in one walk over the free GPUs.
func (f *freeMap) cloneUnheld() *freeMap {
	c := f.clone()
	held := false
	for _, at := range f.reserved {
		if at.IsZero() {
			held = true
			break
		}
	}
	if !held {
		return c
	}
	// Only the nodes in resNodes may have a held GPU (both lists sorted).
	r := 0
	for i := 0; i < len(c.avail); {
		for r < len(f.resNodes) && f.resNodes[r] < c.avail[i] {
			r++
		}
		if r == len(f.resNodes) {
			break
		}
		if f.resNodes[r] != c.avail[i] {
			i++
			continue
		}
		gs := c.gpus[i]
		rest := gs[:0:0]
		for _, g := range gs {
			if at, ok := f.reserved[g.UUID]; !ok || !at.IsZero() {
				rest = append(rest, g)
			}
		}
		if len(rest) == len(gs) {
			i++
			continue
		}
		c.count -= len(gs) - len(rest)
		if len(rest) > 0 {
			c.replace(i, rest)
			i++
			continue
		}
		c.tally(len(gs), -1)
		c.avail = append(c.avail[:i], c.avail[i+1:]...)
		c.gpus = append(c.gpus[:i], c.gpus[i+1:]...)
		c.healthy = append(c.healthy[:i], c.healthy[i+1:]...)
	}
	return c
}

// cloneReserved copies the free GPUs and the reservations.
func (f *freeMap) cloneReserved() *freeMap {
	c := f.clone()
	for g, at := range f.reserved {
		c.reserved[g] = at
	}
	c.resNodes = append([]string(nil), f.resNodes...)
	return c
}

// reserve reserves GPU g of node from at on (zero: for good).
func (f *freeMap) reserve(node, g string, at time.Time) {
	f.reserved[g] = at
	if i, ok := slices.BinarySearch(f.resNodes, node); !ok {
		f.resNodes = slices.Insert(f.resNodes, i, node)
	}
}

// hasRes reports whether a GPU of node may be reserved (resNodes).
func (f *freeMap) hasRes(node string) bool {
	if len(f.resNodes) == 0 {
		return false
	}
	_, ok := slices.BinarySearch(f.resNodes, node)
	return ok
}

// add returns GPUs to the map (a what-if: a task ends or is preempted).
// A node's list is replaced by a new one (clones share the old): the
// returned GPUs, in the node's order, merged by index into its free ones
// (cut from f.arena when set).
func (f *freeMap) add(s *domain.State, ps []events.Placement) {
	for _, p := range ps {
		n := s.Nodes[p.Node]
		if n == nil || !n.Schedulable() {
			continue
		}
		// back is built on the stack (a node with more GPUs than buf
		// holds grows it on the heap): the map keeps a copy of it, or a
		// merge of it into the node's free GPUs.
		var buf [16]domain.GPU
		back := buf[:0]
		h, j := 0, 0 // p.GPUs[j]: the next in the node's order, if they are in it
		for _, g := range n.GPUs {
			if g.Healthy {
				h++
				if j < len(p.GPUs) && p.GPUs[j] == g.UUID {
					j++
					back = append(back, g)
				} else if len(back) < len(p.GPUs) && slices.Contains(p.GPUs, g.UUID) {
					// Once every GPU of p is back (a node's UUIDs are
					// unique), no other GPU of the node is in p.
					back = append(back, g)
				}
			}
		}
		if len(back) == 0 {
			continue
		}
		if !slices.IsSortedFunc(back, byIndex) {
			slices.SortFunc(back, byIndex)
		}
		f.count += len(back)
		i, ok := f.at(p.Node)
		if !ok {
			f.insert(i, p.Node, append(f.list(len(back)), back...), h)
			continue
		}
		cur := f.gpus[i]
		out := f.list(len(cur) + len(back))
		a, b := 0, 0
		for a < len(cur) && b < len(back) {
			if cur[a].Index <= back[b].Index {
				out = append(out, cur[a])
				a++
			} else {
				out = append(out, back[b])
				b++
			}
		}
		out = append(append(out, cur[a:]...), back[b:]...)
		f.replace(i, out)
	}
}

// list returns an empty GPU list with room for n: from the arena if f
// has one.
func (f *freeMap) list(n int) []domain.GPU {
	if f.arena != nil {
		return f.arena.alloc(n)
	}
	return make([]domain.GPU, 0, n)
}

// byIndex orders a node's GPUs (indexes are unique on a node).
func byIndex(a, b domain.GPU) int { return a.Index - b.Index }

func (f *freeMap) take(ps []events.Placement) {
	for _, p := range ps {
		i, ok := f.at(p.Node)
		if !ok {
			continue
		}
		cur := f.gpus[i]
		rest := cur[:0:0]
		for _, g := range cur {
			if !slices.Contains(p.GPUs, g.UUID) {
				rest = append(rest, g)
			}
		}
		f.count -= len(cur) - len(rest)
		f.set(p.Node, rest, 0) // in avail: the count stays
	}
}

// gpuFits reports whether one GPU satisfies the task's constraints.
func gpuFits(t *domain.Task, g domain.GPU) bool { return ModelFits(t, g) && MemoryFits(t, g) }

// ModelFits reports whether the GPU is of the model the task asks for
// (--gpu-model: a case-insensitive part of NVML's name; none: any).
func ModelFits(t *domain.Task, g domain.GPU) bool {
	return t.GPUModel == "" || strings.Contains(strings.ToLower(g.Model), strings.ToLower(t.GPUModel))
}

// MemoryFits reports whether the GPU has the memory the task asks for
// (--min-gpu-mem; none: any).
func MemoryFits(t *domain.Task, g domain.GPU) bool {
	return t.MinGPUMemMiB == 0 || g.MemoryMiB >= t.MinGPUMemMiB
}

// usable returns the free GPUs of a node the task may use: fitting its
// constraints, and either unreserved or reserved from a time after end
// (end zero: no reserved GPU at all).
func (f *freeMap) usable(t *domain.Task, node string, end time.Time) []domain.GPU {
	return f.usableAt(t, f.on(node), f.hasRes(node), end)
}

// usableAt is usable on a node's free GPUs gs, res whether the node has
// reserved GPUs (hasRes): without, only t's constraints filter.
// The result shares gs when every GPU is usable (callers only read it).
func (f *freeMap) usableAt(t *domain.Task, gs []domain.GPU, res bool, end time.Time) []domain.GPU {
	if t.GPUModel == "" && t.MinGPUMemMiB == 0 && !res {
		return gs
	}
	var out []domain.GPU
	for i, g := range gs {
		ok := gpuFits(t, g)
		if ok && res {
			if r, held := f.reserved[g.UUID]; held && (end.IsZero() || r.IsZero() || end.After(r)) {
				ok = false
			}
		}
		switch {
		case ok && out != nil:
			out = append(out, g)
		case !ok && out == nil:
			out = append(make([]domain.GPU, 0, len(gs)-1), gs[:i]...)
		}
	}
	if out == nil {
		return gs
	}
	return out
}

// usableCount is len(usableAt(t, gs, res, end)), without the list.
func (f *freeMap) usableCount(t *domain.Task, gs []domain.GPU, res bool, end time.Time) int {
	if t.GPUModel == "" && t.MinGPUMemMiB == 0 && !res {
		return len(gs)
	}
	k := 0
	for _, g := range gs {
		ok := gpuFits(t, g)
		if ok && res {
			if r, held := f.reserved[g.UUID]; held && (end.IsZero() || r.IsZero() || end.After(r)) {
				ok = false
			}
		}
		if ok {
			k++
		}
	}
	return k
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

// capacity answers "could this task ever run here": on all nodes that exist
// (ever), and on healthy GPUs of schedulable nodes (now).
type capacity struct {
	s     *domain.State
	cache map[capKey][4]int // ever total, ever best node, now total, now best node
	// plain is the same for a task without constraints, from the fold's
	// totals (once read: plainOK).
	plain   [4]int
	plainOK bool
}

type capKey struct {
	model string
	mem   int
}

func (c *capacity) feasible(t *domain.Task) (ever, now bool) {
	k := capKey{t.GPUModel, t.MinGPUMemMiB}
	var v [4]int
	ok := false
	if k == (capKey{}) {
		// Without constraints: the fold's totals.
		if !c.plainOK {
			n := c.s.Totals()
			c.plain, c.plainOK = [4]int{n.GPUs, n.MaxGPUs, n.Healthy, n.MaxHealthy}, true
		}
		v, ok = c.plain, true
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

// fitsUndrained reports whether t would fit on the schedulable and the
// drained nodes' healthy GPUs (why it cannot run now is a drain).
func (c *capacity) fitsUndrained(t *domain.Task) bool {
	total, best := 0, 0
	for _, n := range c.s.Nodes {
		if !n.Schedulable() && n.State != domain.NodeDrained {
			continue
		}
		k := 0
		for _, g := range n.GPUs {
			if g.Healthy && gpuFits(t, g) {
				k++
			}
		}
		total += k
		best = max(best, k)
	}
	return best >= t.GPUs || total >= t.GPUs
}
