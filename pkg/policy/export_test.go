package policy

// WithoutMemo returns a copy of the policy that memoizes no placement
// failure: tests compare its decisions with the policy's.
func (p *Policy) WithoutMemo() *Policy {
	c := *p
	c.noMemo = true
	return &c
}
