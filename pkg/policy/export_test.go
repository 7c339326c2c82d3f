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
