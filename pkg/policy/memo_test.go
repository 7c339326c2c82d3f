package policy_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The placement-failure memo only skips placements that would fail: with
// and without it, a pass decides and explains the same, byte for byte,
// over random states played forward. The queue is long and mostly without
// constraints, so that most placements meet the memo.
func TestPropMemoSameDecisions(t *testing.T) {
	skipped := 0
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		for i, n := 0, rapid.IntRange(0, 60).Draw(t, "more"); i < n; i++ {
			tk := genTask(t, c, fmt.Sprintf("m%d", i))
			if rapid.IntRange(0, 4).Draw(t, "constrained") > 0 {
				tk.model, tk.mem = "", 0
			}
			c.submit(tk)
		}
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 4; step++ {
			r := p.Plan(c.input())
			want := p.WithoutMemo().Plan(c.input())
			if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("step %d: the memo changes the pass (-without +with):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
			}
			c.play(r)
			c.playOn(t)
		}
		skipped++
	})
	t.Logf("%d cases", skipped)
}
