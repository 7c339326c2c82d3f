package policy

// WithoutMemo returns a copy of the policy that memoizes no placement
// failure: tests compare its decisions with the policy's.
func (p *Policy) WithoutMemo() *Policy {
	c := *p
	c.noMemo = true
	return &c
}

// FromScratch returns a copy of the policy that builds each pass from every
// node, GPU and holding task rather than the fold's indexes: tests compare
// its decisions with the policy's.
func (p *Policy) FromScratch() *Policy {
	c := *p
	c.scratch = true
	return &c
}

// SlowEnds returns a copy of the policy whose reservation walks the
// holders' ends as it did before keeping the earliest (endings, endHeap);
// with top > 0 the fast walk keeps only top earliest sorted before it
// heapifies the rest: tests compare their decisions with the policy's.
func (p *Policy) SlowEnds(slow bool, top int) *Policy {
	c := *p
	c.slowEnds, c.topEnds = slow, top
	return &c
}

// WithoutEndIndex returns a copy of the policy whose reservation walk
// predicts every holder rather than reading the fold's end index: tests
// compare its decisions with the policy's.
func (p *Policy) WithoutEndIndex() *Policy {
	c := *p
	c.noEndIndex = true
	return &c
}

// SlowPreempt returns a copy of the policy whose preemption search lists
// and sorts the candidates among every holder at each search, as before
// the pass's victim pool: tests compare its decisions with the policy's.
func (p *Policy) SlowPreempt() *Policy {
	c := *p
	c.slowPreempt = true
	return &c
}

// WalkEnds returns every end the reservation walk of a pass at in yields,
// in order, as "first GPU@remaining": tests compare the walks.
func (p *Policy) WalkEnds(in Input) []string {
	pc := newPass(p.opts, in, p.scratch)
	pc.noMemo, pc.slowEnds, pc.topEnds, pc.noEndIndex = p.noMemo, p.slowEnds, p.topEnds, p.noEndIndex
	w := pc.walkEnds()
	defer w.release()
	var out []string
	for {
		r, pls, ok := w.next()
		if !ok {
			return out
		}
		out = append(out, pls[0].GPUs[0]+"@"+r.String())
	}
}

// UsesEndIndex reports whether a pass at in walks the fold's end index.
func (p *Policy) UsesEndIndex(in Input) bool {
	pc := newPass(p.opts, in, p.scratch)
	pc.noEndIndex, pc.topEnds = p.noEndIndex, p.topEnds
	return pc.estimatedEnds()
}

// WithoutArena returns a copy of the policy whose reservation walk
// allocates every GPU list its what-if builds rather than cutting them
// from an arena: tests compare its decisions with the policy's.
func (p *Policy) WithoutArena() *Policy {
	c := *p
	c.noArena = true
	return &c
}
