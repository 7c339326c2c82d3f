package policy_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The reservation walk that keeps the earliest ends sorted while it
// predicts every holder (and heapifies the rest only when it needs more)
// decides and explains the same, byte for byte, as the walk of every
// holder's ending from a heap — with the default number kept and with 1–3
// kept, so that walks past the kept ones are exercised — over random
// states played forward.
func TestPropEndWalkSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		for i, n := 0, rapid.IntRange(0, 40).Draw(t, "more"); i < n; i++ {
			c.submit(genTask(t, c, fmt.Sprintf("m%d", i)))
		}
		o := genOptions(t)
		p := policy.New(o)
		top := rapid.IntRange(1, 3).Draw(t, "top")
		for step := 0; step < 4; step++ {
			want := p.SlowEnds(true, 0).Plan(c.input())
			for _, q := range []*policy.Policy{p, p.SlowEnds(false, top)} {
				r := q.Plan(c.input())
				if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d (top %d): the end walk changes the pass (-slow +fast):\n%s\nworld:\n%s", step, top, diff, dump(c.st, o, c.now))
				}
			}
			c.play(want)
			c.playOn(t)
		}
	})
}
