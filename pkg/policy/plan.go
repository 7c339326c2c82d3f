package policy

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
)

// pass is the working state of one Plan call. Nothing in it outlives the
// call and nothing in the input state is modified.
type pass struct {
	in   Input
	opts Options
	s    *domain.State
	free *freeMap
	cap  capacity

	usage map[string]int // GPUs held per team, updated as the pass places
	// lend is what a team holds that it keeps: usage less its tasks
	// already yielding; a non-CRITICAL preemption keeps it at or above
	// the team's guarantee.
	lend map[string]int
	// claim is what a team holds, was placed in the pass or is promised
	// to its preemptors: a team reclaims only while it is under its
	// guarantee.
	claim     map[string]int
	stalled   bool           // a task is blocked that neither preempts nor holds: nobody behind it preempts
	guar      map[string]int // resolved guarantees
	underSet  map[string]bool
	anyUnder  bool
	anyVictim bool

	preempting map[string]bool           // victims asked to yield (before or in this pass)
	victimsNow int                       // of which chosen in this pass
	promised   map[string][]*domain.Task // preemptor → its victims still holding GPUs
	owner      map[string]string         // reserved GPU → the task it is reserved for
	hasRes     bool                      // the EASY reservation exists
	nBlocked   int                       // tasks not placed
	blocked    []*domain.Task            // with Explain: the tasks not placed, in order
	tierAhead  []string                  // tier-1 tasks seen (explain)
	ends       []ending                  // holding tasks by predicted end, built lazily
	placedNow  []placed                  // tasks placed in this pass, in order
	behind     int                       // tasks examined after the first blocked one
	// failed memoizes placement failures of tasks without constraints,
	// for one node ([0]) and for gangs ([1]); see pass.place.
	failed [2][]failure
	res    Result

	// pool is victimPool(), once built; cands and allowed are the last
	// search's candidates and the pool members among them; locals, idx,
	// trial and nodeBest are buffers of the searches (searchNode).
	pool     *victimPool
	cands    []*victim
	allowed  []bool
	locals   []local
	idx      []int
	trial    []*victim
	nodeBest []*victim
	// resOnMembers: a reserved GPU may be held by a pool member not
	// chosen yet (noteReserved).
	resOnMembers bool
	// promisedBefore: promised had entries when the pass began. The pass
	// adds one only for the task it steps (preempt), after that task's
	// holdForPromised; a task is stepped once, so without entries at the
	// start holdForPromised finds none.
	promisedBefore bool
}

// ending is a holding task's predicted end: the pass's now plus r.
type ending struct {
	t   *domain.Task
	r   time.Duration
	pls []events.Placement
}

// Plan runs one pass:
//
//  1. Take the queued tasks in order (order.go).
//  2. Skip what can never run here (constraint-unsatisfiable) or not on
//     the healthy nodes (nodes-unhealthy, or node-drained when drained
//     nodes would take it); it blocks nobody.
//  3. Place the task on free GPUs that no reservation holds; or, when it is
//     predicted to end before a reservation starts, on reserved ones too
//     (EASY backfill).
//  4. If it does not fit: if victims are already checkpointing for it,
//     hold the free GPUs it will need; else preempt if the policy lets it
//     (preempt.go); else, if it is the first blocked task, give it the
//     reservation at its earliest predicted start (backfill.go).
func (p *Policy) Plan(in Input) Result {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.drive(pc.step)
}

// step considers one task; pos is its place in the queue's order. It
// reports whether the pass goes on.
func (pc *pass) step(t *domain.Task, tier, pos int) bool {
	in := pc.in
	if tier == tierUnder && pc.opts.Explain {
		pc.tierAhead = append(pc.tierAhead, t.ID)
	}
	// 1. Nothing free and t cannot preempt: t would block the pass (and
	//    stall every later preemption), so without Explain the pass stops
	//    here — unless t cannot run now at all, which blocks nothing: a
	//    later task may still preempt (TestPropPass found the pass
	//    stopping at an unplaceable LOW task ahead of a MEDIUM preemptor).
	ever, now := pc.cap.feasible(t)
	if !pc.opts.Explain && pc.free.count == 0 && !pc.mayPreempt(t, tier) && ever && now {
		return false
	}
	// 2. Feasibility.
	if !ever || !now {
		r := ReasonUnsatisfiable
		switch {
		case ever && pc.cap.fitsUndrained(t):
			r = ReasonNodeDrained
		case ever:
			r = ReasonNodesUnhealthy
		}
		pc.wait(t, pos, r, nil)
		return true
	}
	// 3. Placement, with EASY backfill around reservations, down to
	//    BackfillDepth tasks behind the first blocked one.
	if pc.nBlocked > 0 {
		pc.behind++
	}
	deep := pc.behind > pc.opts.BackfillDepth
	if deep {
		if !pc.opts.Explain {
			return false
		}
		pc.explain(t, pos, tier) // reasons only: the same decisions as without Explain
		return true
	}
	if !(pc.opts.NoBackfill && pc.nBlocked > 0) {
		if ps, ok := pc.place(t, time.Time{}); ok {
			pc.dispatch(t, ps, pc.hasRes)
			return true
		}
		if pc.hasRes && !pc.opts.NoBackfill {
			if ps, ok := pc.place(t, in.Now.Add(in.predict(t))); ok {
				pc.dispatch(t, ps, true)
				return true
			}
		}
	}
	// 4. Blocked.
	if pc.holdForPromised(t) || pc.preempt(t, tier) {
		pc.wait(t, pos, ReasonPreempting, victimIDs(pc.promisedTo(t)))
		pc.block(t)
		return true
	}
	pc.stalled = true
	if !pc.hasRes && !pc.opts.NoBackfill && (pc.free.count > 0 || pc.opts.Explain) {
		pc.reserve(t)
	}
	pc.explain(t, pos, tier)
	pc.block(t)
	if pc.opts.NoBackfill && !pc.opts.Explain && !pc.mayPreempt(t, tier) {
		return false
	}
	return true
}

// drive hands the queued tasks to step in the pass's order, until step
// says stop, and returns the pass's result. Plan hands it pass.step; the
// tests hand it pass.step with their checks of the pass before each call.
func (pc *pass) drive(step func(t *domain.Task, tier, pos int) bool) Result {
	in := pc.in
	pos := 0
	if pc.opts.WithinClass != FIFO || pc.opts.Backfill != BackfillShortest || pc.opts.NoBackfill {
		pc.order(func(t *domain.Task, tier int) bool {
			pos++
			return step(t, tier, pos)
		})
		return pc.res
	}
	// Shortest-job backfill: in queue order up to the first blocked task,
	// then the candidates behind it (as many as BackfillDepth) by tier,
	// class and predicted service, shortest first; ties in queue order.
	// With Explain every task is walked, but only the first BackfillDepth
	// candidates (in queue order, as without Explain) are sorted and
	// examined; the rest are explained after them.
	var cands []candidate
	pc.order(func(t *domain.Task, tier int) bool {
		pos++
		if pc.nBlocked == 0 {
			return step(t, tier, pos)
		}
		if ever, now := pc.cap.feasible(t); !ever || !now {
			return step(t, tier, pos) // never a candidate: it only gets its reason
		}
		if len(cands) == pc.opts.BackfillDepth && !pc.opts.Explain {
			return false
		}
		c := candidate{t: t, tier: tier, pos: pos}
		if len(cands) < pc.opts.BackfillDepth {
			c.key = in.predict(t).Seconds() * float64(max(t.GPUs, 1))
		}
		cands = append(cands, c)
		return true
	})
	sorted := cands[:min(len(cands), pc.opts.BackfillDepth)]
	slices.SortStableFunc(sorted, func(a, b candidate) int {
		switch {
		case a.tier != b.tier:
			return a.tier - b.tier
		case a.t.Priority != b.t.Priority:
			return int(b.t.Priority) - int(a.t.Priority)
		}
		return cmp.Compare(a.key, b.key)
	})
	for _, c := range cands {
		if !step(c.t, c.tier, c.pos) {
			break
		}
	}
	return pc.res
}

// candidate is a backfill candidate of shortest-job backfill.
type candidate struct {
	t    *domain.Task
	tier int
	pos  int     // in the queue's order
	key  float64 // predicted service: GPUs × run time, in GPU-seconds
}

// newPass starts a pass from the fold's indexes (free GPUs per node, GPUs
// per team, tasks yielding, victims, node totals): the pass costs the
// teams and the tasks yielding, not every holder.
func newPass(o Options, in Input) *pass {
	pc := emptyPass(o, in)
	s := pc.s
	pc.free = newFreeMap(s)
	s.TeamGPUs(func(team string, n int) {
		pc.usage[team] = n
		pc.claim[team] = n
		pc.lend[team] = n
	})
	s.EachPreempting(func(t *domain.Task) {
		pc.preempting[t.ID] = true
		pc.lend[t.Team] -= gpuCount(t)
		if t.PreemptFor != "" {
			pc.promised[t.PreemptFor] = append(pc.promised[t.PreemptFor], t)
		}
	})
	pc.anyVictim = s.Victims() > 0
	total := 0
	if len(o.Teams) > 0 {
		total = s.Totals().Healthy
	}
	pc.settle(total)
	return pc
}

// emptyPass is a pass with its maps made and nothing read from the state.
func emptyPass(o Options, in Input) *pass {
	s := in.State
	teams := 0 // sizes the maps by team: the pass adds few teams, if any
	s.TeamGPUs(func(string, int) { teams++ })
	pc := &pass{in: in, opts: o, s: s, cap: capacity{s: s, cache: map[capKey][4]int{}},
		usage: make(map[string]int, teams), lend: make(map[string]int, teams), claim: make(map[string]int, teams), guar: map[string]int{}, underSet: map[string]bool{},
		preempting: map[string]bool{}, promised: map[string][]*domain.Task{}, owner: map[string]string{}}
	if o.Explain {
		pc.res.Waiting = map[string]Wait{}
	}
	return pc
}

// settle completes a pass whose holders were read: what is promised to
// the queued preemptors, and the teams' guarantees out of total healthy
// GPUs (read only with teams).
func (pc *pass) settle(total int) {
	s := pc.s
	pc.promisedBefore = len(pc.promised) > 0
	for id, vs := range pc.promised {
		if p := s.Tasks[id]; p != nil && p.State == domain.Queued {
			pc.claim[p.Team] += p.GPUs
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].SubmitSeq < vs[j].SubmitSeq })
	}
	for team, g := range pc.opts.Teams {
		pc.guar[team] = g.of(total)
		if pc.usage[team] < pc.guar[team] {
			pc.underSet[team] = true
			pc.anyUnder = true
		}
	}
}

// under reports whether the team was under its guarantee when the pass began.
func (pc *pass) under(team string) bool { return pc.underSet[team] }

// mayPreempt reports whether t could still start by preempting someone;
// when not, and nothing is free, the pass can stop early.
func (pc *pass) mayPreempt(t *domain.Task, tier int) bool {
	if !pc.anyVictim && len(pc.promised) == 0 {
		return false
	}
	if pc.stalled {
		return len(pc.promised[t.ID]) > 0
	}
	switch {
	case tier == tierCritical:
		return true
	case tier == tierUnder:
		return true
	case pc.opts.Preemption == Ladder:
		return t.Priority > domain.Low
	}
	return len(pc.promised[t.ID]) > 0
}

func (pc *pass) dispatch(t *domain.Task, ps []events.Placement, backfill bool) {
	pc.free.take(ps)
	pc.usage[t.Team] += t.GPUs
	pc.lend[t.Team] += t.GPUs
	pc.claim[t.Team] += t.GPUs
	pc.placedNow = append(pc.placedNow, placed{t, ps})
	reason := "placed in queue order"
	if backfill {
		reason = "backfilled: predicted to end before the reservation, or off the reserved GPUs"
	}
	pc.res.Decisions = append(pc.res.Decisions, Decision{Kind: Dispatch, TaskID: t.ID, Placements: ps, Reason: reason, Backfill: backfill})
	if pc.ends != nil {
		pc.addEnd(t, ps)
	}
}

// block counts t among the tasks not placed; with Explain it also lists
// it (explain names blocked tasks of a higher class).
func (pc *pass) block(t *domain.Task) {
	pc.nBlocked++
	if pc.opts.Explain {
		pc.blocked = append(pc.blocked, t)
	}
}

func (pc *pass) wait(t *domain.Task, pos int, reason string, blockers []string) {
	if pc.res.Waiting == nil {
		return
	}
	if blockers == nil {
		blockers = []string{}
	}
	w := pc.res.Waiting[t.ID]
	w.Position, w.Reason, w.Blockers = pos, reason, blockers
	pc.res.Waiting[t.ID] = w
}

// explain records why a blocked task waits (only with Options.Explain).
func (pc *pass) explain(t *domain.Task, pos, tier int) {
	if pc.res.Waiting == nil {
		return
	}
	// Free GPUs would fit it, but they are reserved for another task.
	if pc.hasRes {
		saved, savedNodes := pc.free.reserved, pc.free.resNodes
		pc.free.reserved, pc.free.resNodes = map[string]time.Time{}, nil
		ps, ok := place(t, pc.free, pc.s, time.Time{})
		pc.free.reserved, pc.free.resNodes = saved, savedNodes
		if ok {
			seen := map[string]bool{}
			var bl []string
			for _, p := range ps {
				for _, g := range p.GPUs {
					if o := pc.owner[g]; o != "" && !seen[o] {
						seen[o] = true
						bl = append(bl, o)
					}
				}
			}
			sort.Strings(bl)
			pc.wait(t, pos, ReasonReserved, bl)
			return
		}
	}
	if tier == tierRest && pc.anyUnder && len(pc.tierAhead) > 0 {
		if g, ok := pc.guar[t.Team]; !ok || pc.usage[t.Team] >= g {
			pc.wait(t, pos, ReasonTeamOver, first(pc.tierAhead, 3))
			return
		}
	}
	var higher []string
	for _, b := range pc.blocked {
		if b.Priority > t.Priority {
			higher = append(higher, b.ID)
			if len(higher) == 3 {
				break
			}
		}
	}
	if len(higher) > 0 {
		pc.wait(t, pos, ReasonHigherAhead, higher)
		return
	}
	pc.buildEnds()
	var bl []string
	for _, e := range pc.ends {
		bl = append(bl, e.t.ID)
		if len(bl) == 3 {
			break
		}
	}
	pc.wait(t, pos, ReasonNoCapacity, bl)
}

// gpuCount is len(t.GPUUUIDs()) without the copy.
func gpuCount(t *domain.Task) int {
	n := 0
	for _, p := range t.Placements {
		n += len(p.GPUs)
	}
	return n
}

func first(s []string, n int) []string {
	if len(s) > n {
		s = s[:n]
	}
	return append([]string(nil), s...)
}

func victimIDs(ts []*domain.Task) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func describe(t *domain.Task) string {
	return fmt.Sprintf("%s (%s, team %s)", t.ID, t.Priority, t.Team)
}
