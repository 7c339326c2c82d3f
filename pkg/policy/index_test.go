package policy_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// A pass built from the fold's indexes (free GPUs per node, GPUs per team,
// tasks yielding, victims, node totals) decides and explains the same,
// byte for byte, as one built from every node, GPU and holding task, over
// random states played forward — on the state itself and on a CloneLive
// of it, as the forward simulation plans.
func TestPropIndexedSameDecisions(t *testing.T) {
	cases := []struct {
		name  string
		clone bool
	}{
		{"fold", false},
		{"clone-live", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				c := genWorld(t)
				c.submitMore(t, 30)
				o := genOptions(t)
				p := policy.New(o)
				for step := 0; step < 4; step++ {
					in := c.input()
					if tc.clone {
						in.State = in.State.CloneLive()
					}
					r := p.Plan(in)
					want := p.PlanFromScratch(c.input())
					if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
						t.Fatalf("step %d: the indexes change the pass (-scratch +indexed):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
					}
					c.play(r)
					c.playOn(t)
				}
			})
		})
	}
}
