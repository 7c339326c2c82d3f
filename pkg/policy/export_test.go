package policy

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
	for _, e := range o.list {
		ids = append(ids, e.t.ID)
	}
	return ids
}
