package policy_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The reservation walk's what-if cuts the GPU lists it builds from a
// pooled arena: with and without the arena, a pass decides and explains
// the same, byte for byte, over random states played forward (and passes
// in a row reuse the pooled chunks).
func TestPropArenaSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 4; step++ {
			want := p.WithoutArena().Plan(c.input())
			r := p.Plan(c.input())
			if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("step %d: the arena changes the pass (-without +with):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
			}
			c.play(r)
			c.playOn(t)
		}
	})
}
