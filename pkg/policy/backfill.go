package policy

import (
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// buildEnds lists the tasks holding GPUs by predicted end: running tasks
// at start + predicted run time (at least a minute from now), tasks placed
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
	for id, ps := range pc.placedNow {
		t := pc.s.Tasks[id]
		out = append(out, ending{t: t, r: pc.in.predict(t), pls: ps})
	}
	return out
}

// endHeap yields endings by endBefore (a total order, so the input's
// order does not matter), sorting only as far as a reservation walks.
type endHeap []ending

func (h endHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h endHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && endBefore(h[r], h[l]) {
			j = r
		}
		if !endBefore(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h *endHeap) pop() ending {
	old := *h
	e := old[0]
	n := len(old) - 1
	old[0] = old[n]
	old[n] = ending{}
	*h = old[:n]
	h.down(0)
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
	future := pc.free.clone()
	// GPUs held back for preemptors are not the head's.
	for g, at := range pc.free.reserved {
		if at.IsZero() {
			future.take([]events.Placement{{Node: nodeOf(pc.free, g), GPUs: []string{g}}})
		}
	}
	at := pc.in.Now
	ps, ok := place(t, future, pc.s, time.Time{})
	if !ok {
		// Walk the ends in order. A task that fits one node fits once a
		// node whose GPUs came back has enough: no other node changed
		// since place last failed.
		one := t.GPUs <= future.nodeSize(t, pc.s)
		var h endHeap
		if pc.ends != nil {
			h = append(h, pc.ends...)
		} else {
			h = pc.endings()
		}
		h.init()
		for !ok && len(h) > 0 {
			e := h.pop()
			future.add(pc.s, e.pls)
			if future.count < t.GPUs {
				continue
			}
			at = pc.in.Now.Add(e.r)
			if one && !fitsOn(t, future, e.pls) {
				continue
			}
			ps, ok = place(t, future, pc.s, time.Time{})
		}
	}
	if !ok {
		return
	}
	pc.hasRes = true
	for _, p := range ps {
		for _, g := range p.GPUs {
			pc.free.reserved[g] = at
			pc.owner[g] = t.ID
		}
	}
	if pc.res.Waiting != nil {
		w := pc.res.Waiting[t.ID]
		w.ReservedAt = at
		pc.res.Waiting[t.ID] = w
	}
}

// fitsOn reports whether t fits on one of the placements' nodes.
func fitsOn(t *domain.Task, f *freeMap, pls []events.Placement) bool {
	for _, p := range pls {
		if len(f.free[p.Node]) >= t.GPUs && len(f.usable(t, p.Node, time.Time{})) >= t.GPUs {
			return true
		}
	}
	return false
}

func nodeOf(f *freeMap, gpu string) string {
	for n, gs := range f.free {
		for _, g := range gs {
			if g.UUID == gpu {
				return n
			}
		}
	}
	return ""
}

// holdReserved reserves, for t and for good in this pass, the free GPUs of
// a planned placement.
func (pc *pass) holdReserved(t *domain.Task, ps []events.Placement) {
	for _, p := range ps {
		for _, g := range p.GPUs {
			pc.free.reserved[g] = time.Time{}
			pc.owner[g] = t.ID
		}
	}
}
