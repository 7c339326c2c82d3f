package policy

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// promisedTo lists the victims already yielding to t.
func (pc *pass) promisedTo(t *domain.Task) []*domain.Task { return pc.promised[t.ID] }

// holdForPromised: when tasks are already checkpointing for t and their
// GPUs plus the free ones will fit it, hold those free GPUs for t (nobody
// else may take them) and preempt nobody more.
func (pc *pass) holdForPromised(t *domain.Task) bool {
	if !pc.promisedBefore {
		return false
	}
	vs := pc.promised[t.ID]
	if len(vs) == 0 {
		return false
	}
	hyp := pc.free.cloneUnheld()
	defer hyp.release()
	for _, v := range vs {
		hyp.add(pc.s, v.Placements)
	}
	ps, ok := place(t, hyp, pc.s, time.Time{})
	if !ok {
		return false
	}
	pc.holdReserved(t, ps)
	return true
}

// byClass reports whether the preemption policy lets t preempt v by class
// alone: critical-only, t is CRITICAL; ladder, v's class is strictly lower
// (and, under ClassAging, t is ahead of v in the queue's order).
func (pc *pass) byClass(t, v *domain.Task) bool { return byClass(&pc.opts, t, v) }

// MayPreemptByClass reports whether, under o, t may preempt v for its
// class (not for a team's guarantee): under critical-only only a CRITICAL
// t; under the ladder a t of a strictly higher class, and with ClassAging
// (FIFO within class) only a v that t is ahead of in the queue's order.
// The policy's passes decide with it, and audit verify checks the log's
// preemptions with it.
func MayPreemptByClass(o Options, t, v *domain.Task) bool {
	o = o.withDefaults()
	return byClass(&o, t, v)
}

// byClass is MayPreemptByClass on options with their defaults.
func byClass(o *Options, t, v *domain.Task) bool {
	switch o.Preemption {
	case CriticalOnly:
		return t.Priority == domain.Critical
	case Ladder:
		// Under ClassAging, only a victim t is ahead of in the queue's
		// order: one that waited enough to count ahead of t would be back
		// ahead of it once requeued, and take its GPUs again.
		return v.Priority < t.Priority && (o.ClassAging <= 0 || o.WithinClass != FIFO || agedBefore(o, t, v))
	}
	return false
}

// reclaimer: t's team has a guarantee it does not reach, counting what it
// holds, what the pass placed for it and what is promised to its
// preemptors.
func (pc *pass) reclaimer(t *domain.Task) bool {
	g, ok := pc.guar[t.Team]
	return ok && pc.claim[t.Team] < g
}

// lendersKeep reports whether preempting vs for t leaves every other team
// at or above its guarantee (a CRITICAL preemptor may take anything).
func (pc *pass) lendersKeep(t *domain.Task, vs []*victim) bool {
	if t.Priority == domain.Critical || len(pc.guar) == 0 {
		return true
	}
	for i, v := range vs {
		g, ok := pc.guar[v.t.Team]
		if !ok || v.t.Team == t.Team {
			continue
		}
		taken := 0
		for _, w := range vs[:i+1] {
			if w.t.Team == v.t.Team {
				taken += w.n
			}
		}
		if pc.lend[v.t.Team]-taken < g {
			return false
		}
	}
	return true
}

// lostWork is the GPU-seconds a victim would lose: since its last
// checkpoint, or since it started. (Its grace is lost too, but counting
// it made the mix scenario lose more work, not less: docs/performance.md.)
func (pc *pass) lostWork(v *domain.Task) float64 {
	from := v.StartedAt
	if v.CheckpointAt.After(from) {
		from = v.CheckpointAt
	}
	if from.IsZero() || !pc.in.Now.After(from) {
		return 0
	}
	return pc.in.Now.Sub(from).Seconds() * float64(gpuCount(v))
}

// victim is a preemption candidate: the task, its GPUs, the work it would
// lose.
type victim struct {
	t    *domain.Task
	n    int
	lost float64
	// cost orders victims of one class (victimOrder, setCost): lost under
	// LeastLost, the seconds since its start under Newest.
	cost float64
	// taken (pool): chosen in this pass. A pool member is running, so
	// pass.preempting holds it iff it was chosen in this pass.
	taken bool
	pos   int // (pool) its place in victimPool.vs
	// prio and seq are t's Priority and SubmitSeq, copied: the pool's
	// sort reads them without a load of each task.
	prio domain.Priority
	seq  uint64
}

// victimPool is every task a preemption in this pass may ever choose, and
// where they hold GPUs; built once, at the pass's first preemption search
// (the state does not change during a pass, nor does now, so neither do the
// members, their order or their GPUs).
type victimPool struct {
	// vs are the tasks that are running, preemptible and not CRITICAL, in
	// the order preempt prefers them (victimOrder).
	vs []*victim
	// on is, for each member and schedulable node it holds GPUs on, the
	// healthy GPUs of the node it holds there: by node name, then in the
	// members' order.
	on []victimOn
	// byTask is the members by task, built at the first call of member.
	byTask map[*domain.Task]*victim
}

// member returns t's member of the pool; t must be one.
func (p *victimPool) member(t *domain.Task) *victim {
	if p.byTask == nil {
		p.byTask = make(map[*domain.Task]*victim, len(p.vs))
		for _, v := range p.vs {
			p.byTask[v.t] = v
		}
	}
	return p.byTask[t]
}

// victimOn is a pool member holding GPUs on a schedulable node, and how
// many of the node's healthy GPUs it holds there.
type victimOn struct {
	node    string
	i       int // in victimPool.vs
	healthy int
}

// victimPool returns the pass's pool, built at the first call.
//
// A search takes the members mayVictimize (export_test.go, the reference
// predicate) allows, in the pool's order:
// the candidates the reference search (reference_test.go) lists and
// sorts, in the same order, since filtering a sorted list keeps it sorted
// and victimOrder is a total order (SubmitSeq, the sequence of the task's
// submitted record, is unique). For a task that fits one node, the search reads the allowed
// members of each node from on: the lists the reference search builds in
// a map, node by node in the order it visits them (freeMap.nodes: the
// schedulable nodes with GPUs, by name).
func (pc *pass) victimPool() *victimPool {
	if pc.pool != nil {
		return pc.pool
	}
	p := &victimPool{vs: make([]*victim, 0, pc.s.Victims())}
	buf := make([]victim, 0, pc.s.Victims())
	// Where each member holds GPUs is read as the holders are walked (the
	// task just read), with i its place in buf, mapped to its place in
	// the pool once sorted.
	p.on = make([]victimOn, 0, pc.s.Victims()+pc.s.Victims()/8)
	var nc nodeCache
	for i, n := 0, pc.s.Holders(); i < n; i++ {
		v := pc.s.Holder(i)
		if !v.Preemptible || v.Priority == domain.Critical || v.State != domain.Running {
			continue
		}
		p.on = pc.victimNodes(p.on, len(buf), v, &nc)
		buf = append(buf, pc.newVictim(v))
	}
	for i := range buf {
		// A member chosen by an earlier search of this pass without the
		// pool (onFreeNodes) is taken.
		buf[i].taken = pc.victimsNow > 0 && pc.preempting[buf[i].t.ID]
		p.vs = append(p.vs, &buf[i])
	}
	slices.SortFunc(p.vs, victimOrder)
	for i, v := range p.vs {
		v.pos = i
	}
	for k := range p.on {
		p.on[k].i = buf[p.on[k].i].pos
	}
	slices.SortFunc(p.on, func(a, b victimOn) int {
		if c := strings.Compare(a.node, b.node); c != 0 {
			return c
		}
		return a.i - b.i
	})
	pc.pool = p
	return p
}

// newVictim is v as a candidate, its cost by Options.Victims.
func (pc *pass) newVictim(v *domain.Task) victim {
	c := victim{t: v, n: gpuCount(v), lost: pc.lostWork(v), prio: v.Priority, seq: v.SubmitSeq}
	c.cost = c.lost
	if pc.opts.Victims == Newest {
		c.cost = 0
		if !v.StartedAt.IsZero() && pc.in.Now.After(v.StartedAt) {
			c.cost = pc.in.Now.Sub(v.StartedAt).Seconds()
		}
	}
	return c
}

// victimOrder is preempt's preference: the lower class, then the lower
// cost (the less work lost, or the newer), then the later submitted.
func victimOrder(a, b *victim) int {
	if a.prio != b.prio {
		return cmp.Compare(a.prio, b.prio)
	}
	if a.cost != b.cost {
		return cmp.Compare(a.cost, b.cost)
	}
	return cmp.Compare(b.seq, a.seq)
}

// victimNodes appends where v, the pool's member i, holds GPUs: each
// schedulable node with GPUs among its placements (once), with the
// node's healthy GPUs its placements there name (gainOn's count for a
// task without constraints when none of them is reserved).
func (pc *pass) victimNodes(out []victimOn, i int, v *domain.Task, nc *nodeCache) []victimOn {
	for k, p := range v.Placements {
		if slices.ContainsFunc(v.Placements[:k], func(q events.Placement) bool { return q.Node == p.Node }) {
			continue
		}
		n := nc.get(pc.s, p.Node)
		if n == nil || !n.Schedulable() || len(n.GPUs) == 0 {
			continue // not in freeMap.nodes: no search looks at it
		}
		out = append(out, victimOn{p.Node, i, healthyOn(n, v, p.Node)})
	}
	return out
}

// nodeCache is the last node looked up by name (State.Nodes): holders
// sharing a node are often walked one after another.
type nodeCache struct {
	name string
	n    *domain.Node
	ok   bool
}

func (c *nodeCache) get(s *domain.State, name string) *domain.Node {
	if !c.ok || c.name != name {
		c.name, c.n, c.ok = name, s.Nodes[name], true
	}
	return c.n
}

// candidates lists the victims t may preempt, in preference order, and the
// GPUs they and the free ones add up to. With the pool, pc.allowed marks
// the members listed.
func (pc *pass) candidates(t *domain.Task) ([]*victim, int) {
	avail := pc.free.count
	pool := pc.victimPool()
	cands := pc.cands[:0]
	allowed := slices.Grow(pc.allowed[:0], len(pool.vs))[:len(pool.vs)]
	reclaim := pc.reclaimer(t)
	for i, v := range pool.vs {
		// mayVictimize(t, v.t), of which a member passes the first checks
		// but the last two.
		allowed[i] = !v.taken && v.t != t && (pc.byClass(t, v.t) || reclaim && v.t.Team != t.Team)
		if allowed[i] {
			cands = append(cands, v)
			avail += v.n
		}
	}
	pc.cands, pc.allowed = cands, allowed
	return cands, avail
}

// preempt chooses victims for t — the fewest tasks, then the lowest
// classes, then the least work lost since their last checkpoint (or, with
// Options.Victims Newest, the most recently started) — and records the
// preemptions. It reports whether it preempted (or, with no
// victim needed, held free GPUs for t); false too while t is patient
// (Options.PreemptPatience): it waits, and stalls the pass, as a task
// that cannot preempt.
func (pc *pass) preempt(t *domain.Task, tier int) bool {
	if pc.stalled || !pc.mayPreempt(t, tier) {
		return false
	}
	victims, ps, ok, done := pc.onFreeNodes(t)
	if !done {
		cands, avail := pc.candidates(t)
		if avail < t.GPUs || len(cands) == 0 {
			return false
		}
		victims, ps, ok = pc.fewestVictims(t, cands)
	}
	if !ok {
		return false
	}
	if pc.patient(t, victims) {
		return false
	}
	for _, v := range victims {
		why := "team guarantee: " + t.Team + " reclaims GPUs borrowed by " + v.t.Team
		reclaim := !pc.byClass(t, v.t)
		if !reclaim {
			why = pc.opts.Preemption
		}
		pc.preempting[v.t.ID] = true
		v.taken = true
		if done && pc.pool != nil { // onFreeNodes's victim: the pool's member is taken too
			pc.pool.member(v.t).taken = true
		}
		pc.victimsNow++
		pc.usage[v.t.Team] -= v.n
		pc.lend[v.t.Team] -= v.n
		pc.res.Decisions = append(pc.res.Decisions, Decision{Kind: Preempt, TaskID: v.t.ID, For: t.ID, Reclaim: reclaim,
			Reason: fmt.Sprintf("preempted by %s for %s under policy %s", describe(t), t.Priority, why)})
		pc.promised[t.ID] = append(pc.promised[t.ID], v.t)
	}
	pc.holdReserved(t, ps)
	pc.claim[t.Team] += t.GPUs // promised to t: a reclaim stops at the guarantee
	return true
}

// patient reports whether t waits for a cheaper preemption instead of
// preempting vs now (Options.PreemptPatience): t is below CRITICAL, has
// waited less than PreemptPatience since its submission, and vs would
// lose more work since their last checkpoints than t has waited, GPU for
// GPU (lost GPU-seconds > wait × t's GPUs). A victim that checkpoints
// meanwhile loses nothing more, and a holder that ends frees its GPUs
// without a preemption; t preempts at the latest once it has waited
// PreemptPatience, at Result.PatientUntil (the earliest such instant of
// the pass).
func (pc *pass) patient(t *domain.Task, vs []*victim) bool {
	if pc.opts.PreemptPatience <= 0 || t.Priority == domain.Critical || len(vs) == 0 {
		return false
	}
	w := pc.in.Now.Sub(t.SubmittedAt)
	if w >= pc.opts.PreemptPatience {
		return false
	}
	lost := 0.0
	for _, v := range vs {
		lost += v.lost
	}
	if lost <= w.Seconds()*float64(t.GPUs) {
		return false
	}
	if until := t.SubmittedAt.Add(pc.opts.PreemptPatience); pc.res.PatientUntil.IsZero() || until.Before(pc.res.PatientUntil) {
		pc.res.PatientUntil = until
	}
	return true
}

// fewestVictims chooses the victims among cands (in preference order)
// whose GPUs, with the free ones no reservation holds, place t: for a task
// that fits one node, the fewest tasks on any one node, ties to the lower
// classes, then the lower cost (victim.cost), then the first node by name;
// for a gang, a greedy set in preference order with the ones not needed dropped.
// GPUs reserved for another task (held for a preemptor, or the backfill
// reservation) are never planned on.
func (pc *pass) fewestVictims(t *domain.Task, cands []*victim) ([]*victim, []events.Placement, bool) {
	if ps, ok := pc.place(t, time.Time{}); ok {
		// Fits without preempting anyone (strict order kept it from
		// starting): hold the GPUs, preempt nobody.
		return nil, ps, true
	}
	if t.GPUs <= pc.free.nodeSize(t, pc.s) {
		return pc.fewestOnOneNode(t, cands)
	}
	base := pc.free.cloneReserved()
	defer base.release()
	hyp := base.cloneReserved()
	defer hyp.release()
	var vs []*victim
	ok := false
	var ps []events.Placement
	for _, v := range cands {
		if !pc.lendersKeep(t, append(vs[:len(vs):len(vs)], v)) {
			continue
		}
		vs = append(vs, v)
		hyp.add(pc.s, v.t.Placements)
		if ps, ok = place(t, hyp, pc.s, time.Time{}); ok {
			break
		}
	}
	if !ok {
		return nil, nil, false
	}
	for i := len(vs) - 1; i >= 0; i-- {
		trial := base.cloneReserved()
		for j, v := range vs {
			if j != i {
				trial.add(pc.s, v.t.Placements)
			}
		}
		if p2, ok2 := place(t, trial, pc.s, time.Time{}); ok2 {
			vs = append(vs[:i:i], vs[i+1:]...)
			ps = p2
		}
		trial.release()
	}
	return vs, ps, true
}

// setCost orders victim sets of one size: the classes, highest first,
// compared in turn; then the total cost (work lost, or time since the
// starts: victim.cost). For sets of one size, comparing the classes
// sorted highest first in turn is comparing how many victims each class
// has, from CRITICAL down (fewer first): the first place where the sorted
// lists differ holds, in the one that is less, a lower class than the
// other's, which has one more of its class there and the same of every
// higher class. So the counts are kept, not the sorted list (no
// allocation, no sort: searchNode costs every feasible set); a class
// outside LOW..CRITICAL (no fold makes one) keeps the list (classes).
type setCost struct {
	n       [domain.Critical + 1]int32 // victims by class
	lost    float64
	classes []domain.Priority // descending; only with a class outside n
}

// costOf is the cost of the victims ls[i] for i in idx, the cost summed
// in idx's order. It reads the victims only (prio: their tasks' classes),
// not their tasks: searchNode costs many sets.
func costOf(ls []local, idx []int) setCost {
	var c setCost
	odd := false
	for _, i := range idx {
		v := ls[i].v
		if p := v.prio; p >= 0 && p <= domain.Critical {
			c.n[p]++
		} else {
			odd = true
		}
		c.lost += v.cost
	}
	if odd {
		c.n = [domain.Critical + 1]int32{}
		c.classes = make([]domain.Priority, 0, len(idx))
		for _, i := range idx {
			c.classes = append(c.classes, ls[i].v.prio)
		}
		slices.SortFunc(c.classes, func(a, b domain.Priority) int { return cmp.Compare(b, a) })
	}
	return c
}

// sorted appends c's classes, highest first, to out.
func (c setCost) sorted(out []domain.Priority) []domain.Priority {
	if c.classes != nil {
		return append(out, c.classes...)
	}
	for p := domain.Critical; p >= 0; p-- {
		for range c.n[p] {
			out = append(out, p)
		}
	}
	return out
}

func (a setCost) less(b setCost) bool {
	if a.classes != nil || b.classes != nil {
		ac, bc := a.sorted(nil), b.sorted(nil)
		for i := range ac {
			if ac[i] != bc[i] {
				return ac[i] < bc[i]
			}
		}
		return a.lost < b.lost
	}
	for p := domain.Critical; p >= 0; p-- {
		if a.n[p] != b.n[p] {
			return a.n[p] < b.n[p]
		}
	}
	return a.lost < b.lost
}

// local is a candidate holding GPUs on a node, and how many usable GPUs
// preempting it would add there.
type local struct {
	v    *victim
	gain int
}

// fewestOnOneNode searches, node by node, the smallest sets of candidates
// holding GPUs there that free enough usable GPUs for t.
func (pc *pass) fewestOnOneNode(t *domain.Task, cands []*victim) ([]*victim, []events.Placement, bool) {
	var s nodeSearch
	// The same lists from the pool: node by node, the allowed members
	// holding GPUs usable by t there, in preference order.
	pool := pc.victimPool()
	ls := pc.locals[:0]
	most := pc.free.maxFree() // free GPUs on any node, at most
	a := 0                    // the free nodes before a are before node (both by name)
	for i := 0; i < len(pool.on); {
		node := pool.on[i].node
		ls = ls[:0]
		sum := 0
		for ; i < len(pool.on) && pool.on[i].node == node; i++ {
			e := pool.on[i]
			if !pc.allowed[e.i] {
				continue
			}
			if g := pc.gain(t, pool.vs[e.i].t, e); g > 0 {
				ls = append(ls, local{pool.vs[e.i], g})
				sum += g
			}
		}
		// searchNode would find the node's free GPUs and these too
		// few (most < t.GPUs: math.MaxInt is no bound).
		if len(ls) > 0 && (most >= t.GPUs || sum+most >= t.GPUs) {
			for a < len(pc.free.avail) && pc.free.avail[a] < node {
				a++
			}
			var free []domain.GPU // pc.free.on(node)
			if a < len(pc.free.avail) && pc.free.avail[a] == node {
				free = pc.free.gpus[a]
			}
			pc.searchNode(t, &s, node, free, ls)
		}
	}
	clear(ls)
	pc.locals = ls[:0]
	if !s.found {
		return nil, nil, false
	}
	return s.best, pc.onNode(t, s.bestNode, s.best), true
}

// noFreeNodes turns onFreeNodes off, and freeNodesDecided, when set, is
// told what each search it decides found (tests: the pool's search
// decides the same).
var (
	noFreeNodes      = false
	freeNodesDecided func(found bool)
)

// onFreeNodes is fewestVictims's search for a task t that fits one node,
// without the victim pool, when only nodes with free GPUs can give it
// enough: no node has t.GPUs held by victims (domain.State.MaxVictimGPUs).
// A node's search counts its usable free GPUs and, of each candidate
// holding GPUs there, at most the GPUs it holds there (pass.gain), so a
// node where the pass's free GPUs and the victims' (VictimGPUsOn) are
// fewer than t.GPUs finds nothing (searchNode): the search over the
// other nodes, in the same order, of the same candidates in the same
// order, chooses the same victims. It reads a node's candidates from
// the owners of its GPUs (domain.State.Owner: every GPU of a holder's
// placements is the holder's); a candidate chosen in this pass is in
// pass.preempting (the pool's taken). done is false when it does not
// decide: t spans nodes, or some node has t.GPUs held by victims, or t
// fits on free GPUs (fewestVictims holds them, when preempt finds
// candidates). Its victims are not the pool's: when the pool was built
// (by an earlier search of the pass), preempt marks their members taken
// (victimPool.member). Once a cluster is settled, the CRITICAL tasks that cannot
// preempt are searched for again at every pass of the forward simulation,
// and after an end the few nodes with free GPUs are where one may.
func (pc *pass) onFreeNodes(t *domain.Task) (vs []*victim, ps []events.Placement, ok, done bool) {
	if noFreeNodes || pc.s.MaxVictimGPUs() >= t.GPUs {
		return nil, nil, false, false
	}
	if _, fits := pc.place(t, time.Time{}); fits || t.GPUs > pc.free.nodeSize(t, pc.s) {
		return nil, nil, false, false
	}
	var s nodeSearch
	most := pc.free.maxFree()
	reclaim := pc.reclaimer(t)
	var members []*victim
	ls := pc.locals[:0]
	for i, node := range pc.free.avail {
		free := pc.free.gpus[i]
		if len(free)+pc.s.VictimGPUsOn(node) < t.GPUs {
			continue
		}
		// The node's pool members (victimPool), in its order, with the
		// healthy GPUs they hold here (victimNodes).
		members = members[:0]
		n := pc.s.Nodes[node]
		for _, g := range n.GPUs {
			id := pc.s.Owner[g.UUID]
			if id == "" || slices.ContainsFunc(members, func(v *victim) bool { return v.t.ID == id }) {
				continue
			}
			v := pc.s.Tasks[id]
			if v == nil || !v.Preemptible || v.Priority == domain.Critical || v.State != domain.Running {
				continue
			}
			c := pc.newVictim(v)
			c.taken = pc.preempting[v.ID]
			members = append(members, &c)
		}
		slices.SortFunc(members, victimOrder)
		ls = ls[:0]
		sum := 0
		for _, v := range members {
			// candidates' test, then fewestOnOneNode's.
			if v.taken || v.t == t || !(pc.byClass(t, v.t) || reclaim && v.t.Team != t.Team) {
				continue
			}
			e := victimOn{node: node, healthy: healthyOn(n, v.t, node)}
			if g := pc.gain(t, v.t, e); g > 0 {
				ls = append(ls, local{v, g})
				sum += g
			}
		}
		if len(ls) > 0 && (most >= t.GPUs || sum+most >= t.GPUs) {
			pc.searchNode(t, &s, node, free, ls)
		}
	}
	clear(ls)
	pc.locals = ls[:0]
	if freeNodesDecided != nil {
		freeNodesDecided(s.found)
	}
	if !s.found {
		return nil, nil, false, true
	}
	return s.best, pc.onNode(t, s.bestNode, s.best), true, true
}

// healthyOn counts the healthy GPUs of n, named node, that v's placements
// there name (victimNodes's count).
func healthyOn(n *domain.Node, v *domain.Task, node string) int {
	healthy := 0
	for _, q := range v.Placements {
		if q.Node != node {
			continue
		}
		for _, id := range q.GPUs {
			for _, g := range n.GPUs {
				if g.UUID == id {
					if g.Healthy {
						healthy++
					}
					break
				}
			}
		}
	}
	return healthy
}

// nodeSearch is the best victim set found so far, over the nodes searched
// in order.
type nodeSearch struct {
	best     []*victim
	bestNode string
	bestCost setCost
	found    bool
}

// searchNode searches one node, with free GPUs free and whose candidates
// ls hold GPUs there (in preference order), for the smallest sets that
// free enough usable GPUs for t, and keeps the best in s: fewer victims,
// or as many at a lower cost, than the nodes searched before.
func (pc *pass) searchNode(t *domain.Task, s *nodeSearch, node string, free []domain.GPU, ls []local) {
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
	// preference order; the first feasible size wins on this node. The
	// buffers are the pass's: a search costs many nodes.
	idx := slices.Grow(pc.idx[:0], maxK)
	trial := slices.Grow(pc.trial[:0], maxK) // a set lendersKeep checks, copied when kept
	nodeBest := pc.nodeBest[:0]
	defer func() { pc.idx, pc.trial, pc.nodeBest = idx[:0], trial[:0], nodeBest[:0] }()
	for k := 1; k <= maxK; k++ {
		var nodeCost setCost
		found := false // nodeBest holds a set of k
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
				if c := costOf(ls, idx); !found || c.less(nodeCost) {
					trial = trial[:k]
					for j, i := range idx {
						trial[j] = ls[i].v
					}
					if pc.lendersKeep(t, trial) {
						nodeBest, nodeCost, found = append(nodeBest[:0], trial...), c, true
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
		if found {
			if !s.found || k < len(s.best) || nodeCost.less(s.bestCost) {
				// s.best's own array: nodeBest is the pass's buffer.
				s.best, s.bestNode, s.bestCost, s.found = append(s.best[:0], nodeBest...), node, nodeCost, true
			}
			return
		}
	}
}

// gainOn is how many GPUs of node preempting v would make usable for t:
// healthy, fitting t's constraints, reserved for nobody.
func (pc *pass) gainOn(t, v *domain.Task, node string) int {
	n := pc.s.Nodes[node]
	res := pc.free.hasRes(node)
	k := 0
	for _, p := range v.Placements {
		if p.Node != node {
			continue
		}
		for _, id := range p.GPUs {
			if res {
				if _, r := pc.free.reserved[id]; r {
					continue
				}
			}
			for _, g := range n.GPUs {
				if g.UUID == id && g.Healthy && gpuFits(t, g) {
					k++
					break
				}
			}
		}
	}
	return k
}

// gain is gainOn(t, v, e.node) for the pool member v: its healthy GPUs
// there, when t has no constraints and none of them can be reserved. The
// search asks it only for members not taken; while no reserved GPU is
// held by such a member (pass.noteReserved), none of their GPUs is
// reserved.
func (pc *pass) gain(t, v *domain.Task, e victimOn) int {
	if t.GPUModel == "" && t.MinGPUMemMiB == 0 && !pc.resOnMembers {
		return e.healthy
	}
	return pc.gainOn(t, v, e.node)
}

// noteReserved notes a GPU just reserved: resOnMembers is set when the
// task holding it (domain.State.Owner: the fold gives every GPU of a
// holder's placements to the holder, and to nobody else while it holds
// them) may be a victim not chosen yet — running, preemptible, not
// CRITICAL, not chosen in this pass. A member only goes from not chosen
// to chosen, so while resOnMembers is false no reserved GPU is one of a
// member not chosen yet — as far as searches go: once the pass is
// stalled, none follows, and nothing is noted.
func (pc *pass) noteReserved(g string) {
	if pc.resOnMembers || pc.stalled {
		return // (a stalled pass searches no more: preempt)
	}
	if id := pc.s.Owner[g]; id != "" {
		if o := pc.s.Tasks[id]; o != nil && o.State == domain.Running && o.Preemptible && o.Priority != domain.Critical && !pc.preempting[id] {
			pc.resOnMembers = true
		}
	}
}

// onNode is t's placement on node once vs have yielded: the usable GPUs,
// by index, first.
func (pc *pass) onNode(t *domain.Task, node string, vs []*victim) []events.Placement {
	freed := map[string]bool{}
	for _, v := range vs {
		for _, p := range v.t.Placements {
			if p.Node == node {
				for _, g := range p.GPUs {
					freed[g] = true
				}
			}
		}
	}
	var gs []domain.GPU
	for _, g := range pc.free.on(node) {
		gs = append(gs, g)
	}
	for _, g := range pc.s.Nodes[node].GPUs {
		if freed[g.UUID] && g.Healthy {
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].Index < gs[j].Index })
	var out []string
	for _, g := range gs {
		if len(out) == t.GPUs {
			break
		}
		if _, r := pc.free.reserved[g.UUID]; r || !gpuFits(t, g) {
			continue
		}
		out = append(out, g.UUID)
	}
	return []events.Placement{{Node: node, GPUs: out}}
}
