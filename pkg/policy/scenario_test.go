package policy_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/policy"
)

// scenario is one named case of a table test: a state built by events,
// the options of one pass, and the decisions wanted, in summary form.
type scenario struct {
	setup func(c *harness)
	opts  policy.Options
	want  []string
	// bug names a known policy bug this case reproduces: while the
	// decisions differ from want, the case is skipped with "BUG: …";
	// once the policy is fixed, it passes.
	bug string
}

func runScenarios(t *testing.T, cases map[string]scenario) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t)
			tc.setup(c)
			got := summary(c.plan(tc.opts).Decisions)
			knownBug(t, tc.bug, cmp.Diff(tc.want, got))
		})
	}
}

// knownBug fails on a diff, or skips with "BUG: …" when the case
// reproduces a documented policy bug.
func knownBug(t *testing.T, bug, diff string) {
	t.Helper()
	switch {
	case diff == "":
		if bug != "" {
			t.Logf("known bug no longer reproduces, drop the marker: %s", bug)
		}
	case bug != "":
		t.Skipf("BUG: %s (-want +got):\n%s", bug, diff)
	default:
		t.Errorf("(-want +got):\n%s", diff)
	}
}
