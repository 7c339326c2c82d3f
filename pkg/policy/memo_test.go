package policy_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The placement-failure memo only skips placements that would fail: at
// every step of a pass, over random states played forward, the memo's
// answer is place's on the pass's free map (Policy.PlanChecked). The queue is long and mostly without
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
		c.playChecked(t, o, p, 4, "the memo", nil)
		skipped++
	})
	t.Logf("%d cases", skipped)
}
