package policy

import (
	"sort"
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// buildEnds lists the tasks holding GPUs by predicted end: running tasks
// at start + predicted run time (at least a second from now, Input.remaining), tasks placed
// in this pass at now + predicted run time. Tasks already yielding to a
// preemptor are left out: their GPUs are promised.
func (pc *pass) buildEnds() {
	if pc.ends != nil {
		return
	}
	pc.ends = pc.endings()
	sort.Slice(pc.ends, func(i, j int) bool { return endBefore(pc.ends[i], pc.ends[j]) })
}

// endings lists the holding tasks' predicted ends (see buildEnds), in no
// order.
func (pc *pass) endings() []ending {
	out := make([]ending, 0, len(pc.placedNow)+pc.s.Holders())
	pc.s.EachActive(func(t *domain.Task) {
		// Yielding before the pass (Preempting), or chosen as a victim in it.
		if t.State != domain.Preempting && (pc.victimsNow == 0 || !pc.preempting[t.ID]) {
			out = append(out, ending{t: t, r: pc.in.remaining(t), pls: t.Placements})
		}
	})
	for _, p := range pc.placedNow {
		out = append(out, ending{t: p.t, r: pc.in.predict(p.t), pls: p.ps})
	}
	return out
}

// placed is a task placed in this pass, and where.
type placed struct {
	t  *domain.Task
	ps []events.Placement
}

// endKey is a holding task's predicted end without pointers (a pass's
// buffer of them is neither scanned by the GC nor behind write barriers):
// r from the pass's now, the task's submit order (endBefore), and where
// the task is: i >= 0 is State.Holder(i), i < 0 pass.placedNow[-i-1].
type endKey struct {
	r   time.Duration
	seq uint64
	i   int32
}

func keyBefore(a, b endKey) bool {
	if a.r != b.r {
		return a.r < b.r
	}
	return a.seq < b.seq
}

// topEnds is how many of the earliest ends a reservation walk keeps
// sorted as it predicts every holder's; a walk needing more heapifies all.
// A reservation mostly needs a few tasks to end (the benchmark: 4.4).
const topEnds = 16

// keyBufs pools the buffers of end keys across passes (they hold no
// pointers and no state: a pass stays a function of its input).
var keyBufs = sync.Pool{New: func() any { return new([]endKey) }}

// endWalk yields the holding tasks by predicted end (endBefore), as
// buildEnds and endHeap would, predicting each holder once: the topEnds
// earliest are kept sorted while predicting; only a walk that needs more
// heapifies the rest.
type endWalk struct {
	pc   *pass
	old  endHeap // Explain built pc.ends: walk a copy of them
	keys []endKey
	buf  *[]endKey
	top  [topEnds]endKey
	nTop int  // kept in top
	done int  // yielded from top
	heap bool // past top: keys is a heap of the rest
	// est: the walk reads the fold's end index (see startEstimated).
	est  bool
	cand endHeap // ends predicted, not yet yielded
	// src: the walk reads Input.Ends (see startSource), from its si-th.
	src   bool
	si    int
	ahead domain.EndCursor
	due   domain.EndCursor
}

// walkEnds starts a walk of the holding tasks by predicted end: the same
// tasks and ends as endings (or pc.ends once built), in endBefore order.
func (pc *pass) walkEnds() *endWalk {
	w := &endWalk{pc: pc}
	if pc.ends != nil {
		w.old = append(endHeap(nil), pc.ends...)
		w.old.init()
		return w
	}
	if pc.estimatedEnds() {
		w.startEstimated()
		return w
	}
	if pc.in.Ends != nil {
		w.startSource()
		return w
	}
	w.buf = keyBufs.Get().(*[]endKey)
	keys := (*w.buf)[:0]
	s := pc.s
	const lim = topEnds
	push := func(k endKey) {
		keys = append(keys, k)
		// Keep the lim earliest in a max-heap at w.top[:w.nTop].
		top := &w.top
		if w.nTop < lim {
			i := w.nTop
			w.nTop++
			top[i] = k
			for i > 0 {
				p := (i - 1) / 2
				if !keyBefore(top[p], top[i]) {
					break
				}
				top[p], top[i] = top[i], top[p]
				i = p
			}
			return
		}
		if !keyBefore(k, top[0]) {
			return
		}
		top[0] = k
		keyDown(top[:lim], 0, true)
	}
	for i, n := 0, s.Holders(); i < n; i++ {
		t := s.Holder(i)
		// Yielding before the pass (Preempting), or chosen as a victim in it.
		if t.State != domain.Preempting && (pc.victimsNow == 0 || !pc.preempting[t.ID]) {
			push(endKey{r: pc.in.remaining(t), seq: t.SubmitSeq, i: int32(i)})
		}
	}
	for j, p := range pc.placedNow {
		push(endKey{r: pc.in.predict(p.t), seq: p.t.SubmitSeq, i: int32(-j - 1)})
	}
	w.keys = keys
	// Sort the kept earliest ascending (insertion sort: at most topEnds).
	top := w.top[:w.nTop]
	for i := 1; i < len(top); i++ {
		for j := i; j > 0 && keyBefore(top[j], top[j-1]); j-- {
			top[j], top[j-1] = top[j-1], top[j]
		}
	}
	return w
}

// next yields the next holding task's end (from the pass's now) and
// placements; false when every one was yielded.
func (w *endWalk) next() (time.Duration, []events.Placement, bool) {
	if w.src {
		return w.nextSource()
	}
	if w.est {
		return w.nextEstimated()
	}
	if w.buf == nil {
		if len(w.old) == 0 {
			return 0, nil, false
		}
		e := w.old.pop()
		return e.r, e.pls, true
	}
	var k endKey
	if w.done < w.nTop {
		k = w.top[w.done]
		w.done++
	} else {
		// Past the kept earliest: heapify every key and drop those yielded
		// (the earliest w.nTop in the same total order).
		h := keyHeap(w.keys)
		if !w.heap {
			w.heap = true
			h.init()
			for i := 0; i < w.nTop; i++ {
				h.pop()
			}
		}
		if len(h) == 0 {
			w.keys = h
			return 0, nil, false
		}
		k = h.pop()
		w.keys = h
	}
	if k.i >= 0 {
		t := w.pc.s.Holder(int(k.i))
		return k.r, t.Placements, true
	}
	return k.r, w.pc.placedNow[-k.i-1].ps, true
}

// release returns the walk's buffer to the pool.
func (w *endWalk) release() {
	if w.src {
		clear(w.cand)
		c := w.cand[:0]
		candPool.Put(&c)
		w.src, w.cand = false, nil
		return
	}
	if w.est {
		// Past its length the buffer holds nothing: pops clear the slot
		// they leave, and pushes only append.
		clear(w.cand)
		b := estBufs{w.cand[:0], w.ahead.Buf(), w.due.Buf()}
		estPool.Put(&b)
		w.est, w.cand = false, nil
		return
	}
	if w.buf != nil {
		*w.buf = w.keys[:0]
		keyBufs.Put(w.buf)
		w.buf, w.keys = nil, nil
	}
}

// keyHeap is a min-heap of end keys by keyBefore.
type keyHeap []endKey

// init and pop are heapInit and heapPop by keyBefore, written out for
// end keys (keyDown): the generic ones call less through a pointer.
func (h keyHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		keyDown(h, i, false)
	}
}

func (h *keyHeap) pop() endKey {
	old := *h
	e := old[0]
	n := len(old) - 1
	old[0] = old[n]
	old[n] = endKey{}
	*h = old[:n]
	keyDown(*h, 0, false)
	return e
}

// keyDown is heapDown for end keys: by keyBefore, or by keyBefore reversed
// when after is set (the walk's max-heap of the earliest ends).
func keyDown(h []endKey, i int, after bool) {
	less := func(a, b endKey) bool {
		if after {
			a, b = b, a
		}
		if a.r != b.r {
			return a.r < b.r
		}
		return a.seq < b.seq
	}
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// endHeap yields endings by endBefore (a total order, so the input's
// order does not matter), sorting only as far as a reservation walks.
type endHeap []ending

func (h endHeap) init()          { heapInit(h, endBefore) }
func (h *endHeap) pop() ending   { return heapPop((*[]ending)(h), endBefore) }
func (h *endHeap) push(e ending) { heapPush((*[]ending)(h), e, endBefore) }

// heapInit makes h a min-heap by less.
func heapInit[T any](h []T, less func(a, b T) bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i, less)
	}
}

// heapDown moves h[i] down to its place in the min-heap h.
func heapDown[T any](h []T, i int, less func(a, b T) bool) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// heapPush adds e to the min-heap *h.
func heapPush[T any](h *[]T, e T, less func(a, b T) bool) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(s[i], s[p]) {
			return
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// heapPop removes and returns the least element of the min-heap *h,
// clearing the slot it leaves (no pointer outlives the pop).
func heapPop[T any](h *[]T, less func(a, b T) bool) T {
	old := *h
	e := old[0]
	n := len(old) - 1
	old[0] = old[n]
	var zero T
	old[n] = zero
	*h = old[:n]
	heapDown(*h, 0, less)
	return e
}

// endBefore orders ends: every end is the pass's now plus r, so by r, then
// by log order.
func endBefore(a, b ending) bool {
	if a.r != b.r {
		return a.r < b.r
	}
	return a.t.SubmitSeq < b.t.SubmitSeq
}

func (pc *pass) addEnd(t *domain.Task, ps []events.Placement) {
	e := ending{t: t, r: pc.in.predict(t), pls: ps}
	i := sort.Search(len(pc.ends), func(i int) bool { return endBefore(e, pc.ends[i]) })
	pc.ends = append(pc.ends, ending{})
	copy(pc.ends[i+1:], pc.ends[i:])
	pc.ends[i] = e
}

// reserve gives t, the first blocked task, the EASY reservation: walk the
// holding tasks by predicted end, returning their GPUs to a copy of the
// free map, until t fits; that end is the reservation's start, and the GPUs
// t would get then are reserved from it on. A later task may use a reserved
// GPU only if it is predicted to end by then. When t cannot fit even after
// every holding task ends, there is no reservation.
func (pc *pass) reserve(t *domain.Task) {
	at, ps, ok := pc.reservation(t)
	if !ok {
		return
	}
	pc.hasRes = true
	for _, p := range ps {
		for _, g := range p.GPUs {
			pc.free.reserve(p.Node, g, at)
			pc.owner[g] = t.ID
			pc.noteReserved(g)
		}
	}
	if pc.res.Waiting != nil {
		w := pc.res.Waiting[t.ID]
		w.ReservedAt = at
		pc.res.Waiting[t.ID] = w
		// A copy: the walk's placements may be cut from its arena.
		pls := make([]events.Placement, len(ps))
		for i, p := range ps {
			pls[i] = events.Placement{Node: p.Node, GPUs: append([]string(nil), p.GPUs...)}
		}
		pc.res.Reservation = &Reservation{TaskID: t.ID, At: at, Placements: pls}
	}
}

// reservation is reserve's what-if, changing nothing in the pass: when
// and where t, the first blocked task, would start; false when it cannot
// fit even after every holding task ends.
func (pc *pass) reservation(t *domain.Task) (time.Time, []events.Placement, bool) {
	// GPUs held back for preemptors are not the head's.
	future := pc.free.cloneUnheld()
	// future is the walk's alone: add cuts its lists from an arena.
	future.arena = arenaPool.Get().(*gpuArena)
	defer future.release()
	at := pc.in.Now
	ps, ok := place(t, future, pc.s, time.Time{})
	if !ok {
		// Walk the ends in order. A task that fits one node fits once a
		// node whose GPUs came back has enough: no other node changed
		// since place last failed.
		one := t.GPUs <= future.nodeSize(t, pc.s)
		// A gang without constraints: count first, place only when the
		// counts say place succeeds (gangFits is exact, and far cheaper).
		gang := !one && t.GPUModel == "" && t.MinGPUMemMiB == 0
		w := pc.walkEnds()
		for !ok {
			r, pls, more := w.next()
			if !more {
				break
			}
			future.add(pc.s, pls)
			if future.count < t.GPUs {
				continue
			}
			at = pc.in.Now.Add(r)
			if one && !fitsOn(t, future, pls) {
				continue
			}
			if gang && !gangFits(t.GPUs, future) {
				continue
			}
			ps, ok = place(t, future, pc.s, time.Time{})
		}
		w.release()
	}
	return at, ps, ok
}

// fitsOn reports whether t fits on one of the placements' nodes.
func fitsOn(t *domain.Task, f *freeMap, pls []events.Placement) bool {
	for _, p := range pls {
		if len(f.on(p.Node)) >= t.GPUs && len(f.usable(t, p.Node, time.Time{})) >= t.GPUs {
			return true
		}
	}
	return false
}

// gangFits reports, from counts alone, whether place succeeds for a task
// without constraints of g GPUs, more than one node holds, on a map without
// reservations: place takes whole free nodes, most free first, each while
// it is no larger than what is still needed, then the remainder on one
// untaken node with enough. Among whole nodes of one size the choice does
// not change the counts, so it is enough to know how many whole nodes of
// each size there are, and the largest node that is not whole.
func gangFits(g int, f *freeMap) bool {
	if f.count < g {
		return false
	}
	var small [17]int
	whole := small[:]
	if f.maxNode >= len(small) {
		whole = make([]int, f.maxNode+1)
	}
	partial := 0 // most free GPUs on a node that is not whole
	for i, gs := range f.gpus {
		c := len(gs)
		if c <= f.maxNode && c == f.healthy[i] {
			whole[c]++
		} else if c > partial {
			partial = c
		}
	}
	need, left := g, 0 // left: the largest whole node not taken
	for size := f.maxNode; size >= 1 && need > 0; size-- {
		k := whole[size]
		if k == 0 {
			continue
		}
		m := min(k, need/size)
		need -= m * size
		if k > m {
			left = max(left, size)
		}
	}
	return need == 0 || max(partial, left) >= need
}

// holdReserved reserves, for t and for good in this pass, the free GPUs of
// a planned placement.
func (pc *pass) holdReserved(t *domain.Task, ps []events.Placement) {
	for _, p := range ps {
		for _, g := range p.GPUs {
			pc.free.reserve(p.Node, g, time.Time{})
			pc.owner[g] = t.ID
			pc.noteReserved(g)
		}
	}
}
