package policy

import "github.com/gpuq/gpuq/pkg/domain"

// PlanFromScratch is Plan with the pass built from every node, GPU and
// holding task rather than the fold's indexes (reference_test.go): tests
// compare its decisions with the policy's.
func (p *Policy) PlanFromScratch(in Input) Result {
	pc := scratchPass(p.opts, in)
	defer pc.free.release()
	return pc.drive(pc.step)
}

// PlanChecked is Plan with, before each step, the pass's fast components
// compared with their references (reference_test.go: checkPass); it
// returns the differences found.
func (p *Policy) PlanChecked(in Input) (Result, []string) { return p.checkedPlan(in) }

// WalkEnds returns every end the reservation walk of a pass at in yields,
// in order, as "first GPU@remaining"; RefWalkEnds the same from every
// holder's predicted end, sorted (reference_test.go).
func (p *Policy) WalkEnds(in Input) []string {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.walk()
}

// RefWalkEnds: see WalkEnds.
func (p *Policy) RefWalkEnds(in Input) []string {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.refWalk()
}

// UsesEndIndex reports whether a pass at in walks the fold's end index.
func (p *Policy) UsesEndIndex(in Input) bool {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.estimatedEnds()
}

// Order lists the queued tasks in a pass's order as "id/tier/class";
// RefOrder the same by the order's definition, for FIFO within class
// (reference_test.go).
func (p *Policy) Order(in Input) []string {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.orderOf()
}

// RefOrder: see Order.
func (p *Policy) RefOrder(in Input) []string {
	pc := newPass(p.opts, in)
	defer pc.free.release()
	return pc.refOrder()
}

// EndOrderIDs lists an EndOrder's tasks in order.
func EndOrderIDs(o *EndOrder) []string {
	var ids []string
	for _, e := range o.sorted() {
		ids = append(ids, e.t.ID)
	}
	return ids
}

// push appends a node after every node in avail, with its free GPUs gs
// (not empty) and h healthy GPUs.
func (f *freeMap) push(node string, gs []domain.GPU, h int) {
	f.avail = append(f.avail, node)
	f.gpus = append(f.gpus, gs)
	f.healthy = append(f.healthy, h)
	f.count += len(gs)
	f.tally(len(gs), 1)
	f.used = max(f.used, len(f.avail))
}

// mayVictimize reports whether t may preempt v under the options:
// only running, preemptible, non-CRITICAL tasks not already yielding; then
// by class (byClass), or, with teams, a team under its guarantee reclaims
// GPUs another team borrows beyond its own guarantee. Only a CRITICAL
// preemptor may take another team below its guarantee (the set as a whole
// is checked by lendersKeep).
func (pc *pass) mayVictimize(t, v *domain.Task) bool {
	if v.State != domain.Running || !v.Preemptible || v.Priority == domain.Critical || pc.preempting[v.ID] || v.ID == t.ID {
		return false
	}
	if pc.byClass(t, v) {
		return true
	}
	return pc.reclaimer(t) && v.Team != t.Team
}

// SetFreeNodesSearch turns the preemption search without the victim pool
// (pass.onFreeNodes) on or off; tests compare the passes with and without
// it.
func SetFreeNodesSearch(on bool) { noFreeNodes = !on }

// OnFreeNodesDecided sets the function told what each search without the
// pool found (nil: none).
func OnFreeNodesDecided(f func(found bool)) { freeNodesDecided = f }
