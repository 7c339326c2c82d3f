package policy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/policy"
)

// The preemption search without the victim pool (pass.onFreeNodes: for a
// task that fits one node when no node has as many GPUs held by victims,
// only the nodes with free GPUs, their candidates read from the owners of
// their GPUs) decides every pass as the search over the pool does: the
// same decisions, reasons and waits (deep equality), over random worlds
// played forward pass after pass — the decisions applied, time passing,
// tasks yielding and ending — so that searches meet members chosen
// earlier in the pass, yielding tasks and promised GPUs. Half the worlds
// are busy (genBusyWorld). The fold's index of the victims' GPUs per node
// (domain.State.VictimGPUsOn) is checked against a recount at each pass,
// and each pass with its references at every step (Policy.PlanChecked,
// whose checks build the pool before each search: so the searches without
// it follow one with it, and their victims must be the pool's taken
// members at the next step's check of the candidates).
func TestPropFreeNodesSearchSameResult(t *testing.T) {
	var decided, found, passes, preempting int
	policy.OnFreeNodesDecided(func(f bool) {
		decided++
		if f {
			found++
		}
	})
	defer policy.OnFreeNodesDecided(nil)
	defer policy.SetFreeNodesSearch(true)
	rapid.Check(t, func(t *rapid.T) {
		var c *harness
		if rapid.Bool().Draw(t, "busy") {
			c = genBusyWorld(t)
		} else {
			c = genWorld(t)
			c.submitMore(t, 30)
		}
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 6; step++ {
			if m := c.st.IndexMismatch(); m != "" {
				t.Fatalf("step %d: the fold's indexes: %s", step, m)
			}
			policy.SetFreeNodesSearch(true)
			r := p.Plan(c.input())
			policy.SetFreeNodesSearch(false)
			want := p.Plan(c.input())
			policy.SetFreeNodesSearch(true)
			if diff := cmp.Diff(want, r); diff != "" {
				t.Fatalf("step %d: the search without the pool decides otherwise (-pool +without):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
			}
			// The pass checked against its references at every step
			// (which builds the pool before each search, so that searches
			// without it follow searches with it).
			checked, bad := p.PlanChecked(c.input())
			if len(bad) > 0 {
				t.Fatalf("step %d: the pass differs from its references:\n%s\nworld:\n%s", step, strings.Join(bad, "\n"), dump(c.st, o, c.now))
			}
			if diff := cmp.Diff(want, checked); diff != "" {
				t.Fatalf("step %d: the checked pass decides otherwise (-pool +checked):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
			}
			passes++
			if len(preempts(r)) > 0 {
				preempting++
			}
			c.play(r)
			c.playOn(t)
		}
	})
	t.Logf("%d passes, %d preempting; %d searches decided without the pool, %d of them finding victims", passes, preempting, decided, found)
	if decided == 0 || found == 0 {
		t.Errorf("the search without the pool decided %d searches, found victims in %d: the test does not exercise it", decided, found)
	}
}
