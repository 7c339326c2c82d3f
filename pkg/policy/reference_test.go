package policy

// The reference implementations the property tests compare the policy's
// one path with: what the pass computed before each optimisation (the
// fold's indexes, the placement-failure memo, the end walks, the arena,
// the victim pool), kept here rather than behind switches in the policy.
// checkPass compares them with the pass's, at the state of a real pass,
// before each of its steps.

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// scratchPass starts a pass from every node, GPU and holding task, as
// newPass did before the fold kept its indexes.
func scratchPass(o Options, in Input) *pass {
	pc := emptyPass(o, in)
	pc.free = scratchFreeMap(pc.s)
	pc.scratchHolders()
	all := &domain.Task{}
	everTotal, everBest := pc.cap.count(all, false)
	nowTotal, nowBest := pc.cap.count(all, true)
	pc.cap.plain, pc.cap.plainOK = [4]int{everTotal, everBest, nowTotal, nowBest}, true
	pc.settle(nowTotal)
	return pc
}

// scratchFreeMap builds the free map from every node and GPU owner, as
// newFreeMap did before the fold kept the index.
func scratchFreeMap(s *domain.State) *freeMap {
	f := &freeMap{reserved: map[string]time.Time{}}
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
			f.push(name, g[:len(g):len(g)], healthy)
		}
		f.maxNode = max(f.maxNode, healthy)
	}
	return f
}

// scratchHolders computes from every holding task what newPass reads from
// the fold's indexes.
func (pc *pass) scratchHolders() {
	pc.s.EachActive(func(t *domain.Task) {
		n := gpuCount(t)
		pc.usage[t.Team] += n
		pc.claim[t.Team] += n
		switch {
		case t.State == domain.Preempting:
			pc.preempting[t.ID] = true
			pc.lend[t.Team] -= n
			if t.PreemptFor != "" {
				pc.promised[t.PreemptFor] = append(pc.promised[t.PreemptFor], t)
			}
		case t.State == domain.Running && t.Preemptible && t.Priority != domain.Critical:
			pc.anyVictim = true
		}
	})
	for team, n := range pc.usage {
		pc.lend[team] += n
	}
}

// refEnds is every holding task's predicted end, sorted (endBefore):
// running tasks at remaining, tasks placed in the pass at their predicted
// run time; tasks yielding, before the pass or chosen in it, left out.
func (pc *pass) refEnds() []ending {
	var out []ending
	for _, t := range pc.s.Active() {
		if t.State != domain.Preempting && !pc.preempting[t.ID] {
			out = append(out, ending{t: t, r: pc.in.remaining(t), pls: t.Placements})
		}
	}
	for _, p := range pc.placedNow {
		out = append(out, ending{t: p.t, r: pc.in.predict(p.t), pls: p.ps})
	}
	sort.Slice(out, func(i, j int) bool { return endBefore(out[i], out[j]) })
	return out
}

// walkString is an end as the tests print it: "first GPU@remaining".
func walkString(r time.Duration, pls []events.Placement) string {
	return pls[0].GPUs[0] + "@" + r.String()
}

// walk lists every end the pass's walk yields.
func (pc *pass) walk() []string {
	w := pc.walkEnds()
	defer w.release()
	var out []string
	for {
		r, pls, ok := w.next()
		if !ok {
			return out
		}
		out = append(out, walkString(r, pls))
	}
}

// refWalk lists refEnds as walk does.
func (pc *pass) refWalk() []string {
	var out []string
	for _, e := range pc.refEnds() {
		out = append(out, walkString(e.r, e.pls))
	}
	return out
}

// refUnheld is cloneUnheld as it was: each GPU held for a preemptor
// looked up in the free map and taken from a clone.
func (pc *pass) refUnheld() *freeMap {
	c := pc.free.clone()
	for g, at := range pc.free.reserved {
		if at.IsZero() {
			c.take([]events.Placement{{Node: nodeOf(pc.free, g), GPUs: []string{g}}})
		}
	}
	return c
}

// refUsableOf is freeMap.usableAt as it was before resNodes: every GPU
// looked up among the reservations.
func refUsableOf(f *freeMap, t *domain.Task, gs []domain.GPU, end time.Time) []domain.GPU {
	var out []domain.GPU
	for _, g := range gs {
		ok := gpuFits(t, g)
		if ok && len(f.reserved) > 0 {
			if r, held := f.reserved[g.UUID]; held && (end.IsZero() || r.IsZero() || end.After(r)) {
				ok = false
			}
		}
		if ok {
			out = append(out, g)
		}
	}
	return out
}

// refResNodes is what freeMap.resNodes keeps: the nodes of the reserved
// GPUs, sorted, found by scanning every node's GPUs.
func refResNodes(s *domain.State, f *freeMap) []string {
	var out []string
	for g := range f.reserved {
		for name, n := range s.Nodes {
			if slices.ContainsFunc(n.GPUs, func(x domain.GPU) bool { return x.UUID == g }) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func gpuIDs(gs []domain.GPU) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.UUID)
	}
	return out
}

func nodeOf(f *freeMap, gpu string) string {
	for i, gs := range f.gpus {
		for _, g := range gs {
			if g.UUID == gpu {
				return f.avail[i]
			}
		}
	}
	return ""
}

// refReservation is the reservation by its definition: return the holders'
// GPUs to a copy of the free map (less the GPUs held for preemptors, its
// lists allocated, not cut from an arena) end by end, in refEnds' order,
// trying to place t after each, until it fits.
func (pc *pass) refReservation(t *domain.Task) (time.Time, []events.Placement, bool) {
	future := pc.refUnheld()
	defer future.release()
	at := pc.in.Now
	ps, ok := place(t, future, pc.s, time.Time{})
	for _, e := range pc.refEnds() {
		if ok {
			break
		}
		future.add(pc.s, e.pls)
		at = pc.in.Now.Add(e.r)
		ps, ok = place(t, future, pc.s, time.Time{})
	}
	if !ok {
		return time.Time{}, nil, false
	}
	return at, ps, true
}

// refCandidates lists and sorts the victims t may preempt among every
// holder, as before the victim pool.
func (pc *pass) refCandidates(t *domain.Task) ([]*victim, int) {
	avail := pc.free.count
	var cands []*victim
	for _, v := range pc.s.Active() {
		if pc.mayVictimize(t, v) {
			c := pc.newVictim(v)
			cands = append(cands, &c)
			avail += c.n
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.t.Priority != b.t.Priority {
			return a.t.Priority < b.t.Priority
		}
		if a.cost != b.cost {
			return a.cost < b.cost
		}
		return a.t.SubmitSeq > b.t.SubmitSeq
	})
	return cands, avail
}

// refFewestVictims is fewestVictims with the search on one node by a map
// of the candidates by node, as before the victim pool (the gang search
// has one implementation).
func (pc *pass) refFewestVictims(t *domain.Task, cands []*victim) ([]*victim, []events.Placement, bool) {
	if ps, ok := place(t, pc.free, pc.s, time.Time{}); ok {
		return nil, ps, true
	}
	if t.GPUs > pc.free.nodeSize(t, pc.s) {
		return pc.fewestVictims(t, cands)
	}
	var s nodeSearch
	byNode := map[string][]local{}
	for _, v := range cands {
		for i, p := range v.t.Placements {
			if dup := slices.ContainsFunc(v.t.Placements[:i], func(q events.Placement) bool { return q.Node == p.Node }); dup {
				continue
			}
			if g := pc.gainOn(t, v.t, p.Node); g > 0 {
				byNode[p.Node] = append(byNode[p.Node], local{v, g})
			}
		}
	}
	for _, node := range pc.free.nodes {
		if ls := byNode[node]; len(ls) > 0 {
			pc.refSearchNode(t, &s, node, pc.free.on(node), ls)
		}
	}
	if !s.found {
		return nil, nil, false
	}
	return s.best, pc.onNode(t, s.bestNode, s.best), true
}

// refSearchNode is searchNode as it was, each set kept in a new slice
// (searchNode keeps them in the pass's buffers): refFewestVictims's
// search. It searches one node, with free GPUs free and whose candidates
// ls hold GPUs there (in preference order), for the smallest sets that
// free enough usable GPUs for t, and keeps the best in s: fewer victims,
// or as many at a lower cost, than the nodes searched before.
func (pc *pass) refSearchNode(t *domain.Task, s *nodeSearch, node string, free []domain.GPU, ls []local) {
	sum := 0
	for _, l := range ls {
		sum += l.gain
	}
	if len(free)+sum < t.GPUs {
		return // even every free GPU there is not enough
	}
	have := pc.free.usableCount(t, free, pc.free.hasRes(node), time.Time{})
	if have+sum < t.GPUs {
		return
	}
	maxK := len(ls)
	if s.found {
		maxK = min(maxK, len(s.best))
	}
	// Subsets by size, each size in lexicographic order of the
	// preference order; the first feasible size wins on this node.
	idx := make([]int, 0, maxK)
	trial := make([]*victim, 0, maxK) // a set lendersKeep checks, copied when kept
	for k := 1; k <= maxK; k++ {
		var nodeBest []*victim
		var nodeCost setCost
		idx = idx[:k]
		for i := range idx {
			idx[i] = i
		}
		for {
			g := have
			for _, i := range idx {
				g += ls[i].gain
			}
			if g >= t.GPUs {
				// Kept iff lendersKeep and it costs less than the best:
				// the cheaper test first.
				if c := costOf(ls, idx); nodeBest == nil || c.less(nodeCost) {
					trial = trial[:k]
					for j, i := range idx {
						trial[j] = ls[i].v
					}
					if pc.lendersKeep(t, trial) {
						nodeBest, nodeCost = slices.Clone(trial), c
					}
				}
			}
			// Next combination.
			j := k - 1
			for j >= 0 && idx[j] == len(ls)-k+j {
				j--
			}
			if j < 0 {
				break
			}
			idx[j]++
			for m := j + 1; m < k; m++ {
				idx[m] = idx[m-1] + 1
			}
		}
		if nodeBest != nil {
			if !s.found || k < len(s.best) || nodeCost.less(s.bestCost) {
				s.best, s.bestNode, s.bestCost, s.found = nodeBest, node, nodeCost, true
			}
			return
		}
	}
}

// mapContent is what a free map holds, as the tests compare it.
func mapContent(f *freeMap) string {
	var b []string
	for i, n := range f.avail {
		var gs []string
		for _, g := range f.gpus[i] {
			gs = append(gs, g.UUID)
		}
		b = append(b, fmt.Sprintf("%s/%d:%v", n, f.healthy[i], gs))
	}
	return fmt.Sprintf("count %d maxNode %d %v", f.count, f.maxNode, b)
}

func victimsOf(vs []*victim) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, fmt.Sprintf("%s/%d/%g/%g", v.t.ID, v.n, v.lost, v.cost))
	}
	return out
}

// checkPass compares, before the pass steps t, each of the pass's fast
// components with its reference, and describes every difference: the
// placement with the memo and without; the end walk; the copy of the free
// map less the GPUs held for preemptors; the reservation's what-if; and,
// where t may preempt, the candidates and the victims chosen. None of them
// changes what the pass decides (checkedPlan verifies it): the memo only
// records failures, and the searches are what-ifs.
func (pc *pass) checkPass(t *domain.Task, tier int) []string {
	var bad []string
	differ := func(what string, got, want any) {
		if !reflect.DeepEqual(got, want) {
			bad = append(bad, fmt.Sprintf("task %s: %s: got %v, want %v", t.ID, what, got, want))
		}
	}
	if ever, now := pc.cap.feasible(t); !ever || !now {
		return nil
	}
	ends := []time.Time{{}}
	if pc.hasRes && !pc.opts.NoBackfill {
		ends = append(ends, pc.in.Now.Add(pc.in.predict(t)))
	}
	for _, end := range ends {
		ps, ok := pc.place(t, end)
		rps, rok := place(t, pc.free, pc.s, end)
		differ(fmt.Sprintf("the memo (end %v)", end), fmt.Sprint(ok, ps), fmt.Sprint(rok, rps))
	}
	differ("the nodes with reserved GPUs", pc.free.resNodes, refResNodes(pc.s, pc.free))
	for i, node := range pc.free.avail {
		gs := pc.free.gpus[i]
		for _, end := range ends {
			u := pc.free.usableAt(t, gs, pc.free.hasRes(node), end)
			ru := refUsableOf(pc.free, t, gs, end)
			differ(fmt.Sprintf("the usable GPUs on %s (end %v)", node, end), gpuIDs(u), gpuIDs(ru))
			differ(fmt.Sprintf("the usable count on %s (end %v)", node, end), pc.free.usableCount(t, gs, pc.free.hasRes(node), end), len(ru))
		}
	}
	differ("the end walk", pc.walk(), pc.refWalk())
	u, ru := pc.free.cloneUnheld(), pc.refUnheld()
	differ("the free GPUs not held", mapContent(u), mapContent(ru))
	u.release()
	ru.release()
	at, ps, ok := pc.reservation(t)
	rat, rps, rok := pc.refReservation(t)
	if !ok {
		at, ps = time.Time{}, nil // no reservation: the time walked to is no answer
	}
	differ("the reservation", fmt.Sprint(ok, at, ps), fmt.Sprint(rok, rat, rps))
	if !pc.stalled && pc.mayPreempt(t, tier) {
		cands, avail := pc.candidates(t)
		rcands, ravail := pc.refCandidates(t)
		differ("the candidates", fmt.Sprint(avail, victimsOf(cands)), fmt.Sprint(ravail, victimsOf(rcands)))
		if avail >= t.GPUs && len(cands) > 0 {
			vs, ps, ok := pc.fewestVictims(t, cands)
			rvs, rps, rok := pc.refFewestVictims(t, rcands)
			differ("the victims", fmt.Sprint(ok, victimsOf(vs), ps), fmt.Sprint(rok, victimsOf(rvs), rps))
		}
	}
	return bad
}

// checkedPlan is Plan with checkPass before each step; it returns the
// differences checkPass found.
func (p *Policy) checkedPlan(in Input) (Result, []string) {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	var bad []string
	r := pc.drive(func(t *domain.Task, tier, pos int) bool {
		bad = append(bad, pc.checkPass(t, tier)...)
		return pc.step(t, tier, pos)
	})
	// The walk once the pass has placed and preempted.
	pc.ends = nil
	if w, rw := pc.walk(), pc.refWalk(); !reflect.DeepEqual(w, rw) {
		bad = append(bad, fmt.Sprintf("the end walk after the pass: got %v, want %v", w, rw))
	}
	return r, bad
}

// refOrder is the queue's order under FIFO within class by its
// definition: every queued task sorted by tier, then (with ClassAging) by
// its submit time less ClassAging per class above LOW, then the higher
// class, then queue order.
func (pc *pass) refOrder() []string {
	q := pc.s.Queued()
	key := func(t *domain.Task) time.Time {
		return t.SubmittedAt.Add(-time.Duration(int(t.Priority)-int(domain.Low)) * pc.opts.ClassAging)
	}
	// Under StarvationWait: CRITICAL, then the starved tasks (waited that
	// long, never started) by submit time and class, then the rest.
	group := func(t *domain.Task) int {
		switch {
		case t.Priority == domain.Critical:
			return 0
		case pc.opts.StarvationWait > 0 && t.FirstStarted.IsZero() && pc.in.Now.Sub(t.SubmittedAt) >= pc.opts.StarvationWait:
			return 1
		}
		return 2
	}
	sort.SliceStable(q, func(i, j int) bool {
		a, b := q[i], q[j]
		if ga, gb := group(a), group(b); ga != gb {
			return ga < gb
		} else if ga == 1 {
			if !a.SubmittedAt.Equal(b.SubmittedAt) {
				return a.SubmittedAt.Before(b.SubmittedAt)
			}
			if a.Priority != b.Priority {
				return a.Priority > b.Priority
			}
			return domain.InLine(a, b)
		}
		if ta, tb := pc.tier(a), pc.tier(b); ta != tb {
			return ta < tb
		}
		if pc.opts.ClassAging > 0 && !key(a).Equal(key(b)) {
			return key(a).Before(key(b))
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return domain.InLine(a, b)
	})
	out := []string{}
	for _, t := range q {
		out = append(out, fmt.Sprintf("%s/%d/%s", t.ID, pc.tier(t), t.Priority))
	}
	return out
}

// orderOf lists the pass's order as refOrder does.
func (pc *pass) orderOf() []string {
	out := []string{}
	pc.order(func(t *domain.Task, tier int) bool {
		out = append(out, fmt.Sprintf("%s/%d/%s", t.ID, tier, t.Priority))
		return true
	})
	return out
}
