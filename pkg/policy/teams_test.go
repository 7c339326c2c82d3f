package policy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

func TestTeamGuarantees(t *testing.T) {
	vision4 := policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}}
	both4 := policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}, "nlp": {GPUs: 4}}}
	cases := map[string]scenario{
		"under guarantee: its LOW before another team's HIGH": {
			setup: func(c *harness) {
				c.nodes(1, 4).submit(
					task{id: "nlp-high", team: "nlp", class: domain.High, gpus: 4},
					task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4},
				)
			},
			opts: vision4,
			want: []string{"dispatch vision-low n1[0-3]"},
		},
		"under guarantee: not before another team's CRITICAL": {
			setup: func(c *harness) {
				c.nodes(1, 4).submit(
					task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4},
					task{id: "nlp-crit", team: "nlp", class: domain.Critical, gpus: 4},
				)
			},
			opts: vision4,
			want: []string{"dispatch nlp-crit n1[0-3]"},
		},
		"under guarantee: class order within the team": {
			setup: func(c *harness) {
				c.nodes(1, 2).submit(
					task{id: "vision-low", team: "vision", class: domain.Low},
					task{id: "nlp-high", team: "nlp", class: domain.High},
					task{id: "vision-med", team: "vision", class: domain.Medium},
				)
			},
			opts: vision4,
			want: []string{"dispatch vision-med n1[0]", "dispatch vision-low n1[1]"},
		},
		"at its guarantee a team has no precedence": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "vision-run", team: "vision", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(
						task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4},
						task{id: "nlp-high", team: "nlp", class: domain.High, gpus: 4},
					)
			},
			opts: vision4,
			want: []string{"dispatch nlp-high n1[4-7]"},
		},
		"without teams, class order": {
			setup: func(c *harness) {
				c.nodes(1, 4).submit(
					task{id: "nlp-high", team: "nlp", class: domain.High, gpus: 4},
					task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4},
				)
			},
			want: []string{"dispatch nlp-high n1[0-3]"},
		},
		"a share resolves on the healthy GPUs of schedulable nodes": {
			// 8 healthy GPUs up: a share of 0.5 is 4; vision holds 4.
			setup: func(c *harness) {
				c.nodes(3, 4).drain("n3").
					running(task{id: "vision-run", team: "vision", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(
						task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4},
						task{id: "nlp-high", team: "nlp", class: domain.High, gpus: 4},
					)
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {Share: 0.5}}},
			want: []string{"dispatch nlp-high n2[0-3]"},
		},
		"reclaim: preempt a borrower of a team without guarantee": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "nlp-1", team: "nlp", class: domain.High}, on("n1", 0, 1, 2, 3)).
					running(task{id: "nlp-2", team: "nlp", class: domain.High}, on("n1", 4, 5, 6, 7)).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: vision4,
			want: []string{"preempt nlp-2 for vision-low"},
		},
		"reclaim: the borrower's team keeps its guarantee": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "nlp-2", team: "nlp", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: both4,
			want: []string{"preempt nlp-2 for vision-low"},
		},
		"reclaim: never below the lender's guarantee": {
			setup: func(c *harness) {
				c.nodes(2, 4).
					running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "other", team: "ml", class: domain.Low, noPreempt: true}, on("n2", 0, 1, 2, 3)).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: both4,
			want: []string{},
		},
		"reclaim: never below the lender's guarantee, counting every victim": {
			// nlp holds 8 with a guarantee of 4: either of its tasks may
			// go, not both; vision needs 8 on one node, so nobody goes.
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "nlp-2", team: "nlp", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					running(task{id: "ml", team: "ml", class: domain.Low, noPreempt: true}, on("n2", span(0, 8)...)).
					submit(task{id: "vision-big", team: "vision", class: domain.Low, gpus: 8})
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 8}, "nlp": {GPUs: 4}}},
			want: []string{},
		},
		"reclaim: only preemptible borrowers": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "nlp-1", team: "nlp", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: vision4,
			want: []string{},
		},
		"reclaim: never a CRITICAL borrower": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "nlp-crit", team: "nlp", class: domain.Critical}, on("n1", 0, 1, 2, 3)).
					submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			},
			opts: vision4,
			want: []string{},
		},
		"reclaim: not from its own team": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "vision-1", team: "vision", class: domain.Low}, on("n1", 0, 1)).
					running(task{id: "nlp-1", team: "nlp", noPreempt: true}, on("n1", 2, 3)).
					submit(task{id: "vision-2", team: "vision", class: domain.High, gpus: 4})
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}, Preemption: policy.Ladder},
			want: []string{},
		},
		"reclaim stops at the guarantee": {
			// vision, guaranteed 2, has four 1-GPU tasks waiting: it may
			// reclaim 2 GPUs, not borrow 4 by preempting.
			setup: func(c *harness) {
				c.nodes(1, 4)
				for i := 0; i < 4; i++ {
					c.running(task{id: "nlp-" + itoa(i), team: "nlp", class: domain.Low}, on("n1", i))
				}
				for i := 0; i < 4; i++ {
					c.submit(task{id: "vision-" + itoa(i), team: "vision", class: domain.Low})
				}
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 2}}},
			want: []string{"preempt nlp-3 for vision-0", "preempt nlp-2 for vision-1"},
		},
	}
	runScenarios(t, cases)
}

// The reclaim's reason names the team guarantee, whatever the lender's own
// guarantee.
func TestReclaimReason(t *testing.T) {
	cases := map[string]struct {
		teams policy.Teams
	}{
		"lender without guarantee":         {teams: policy.Teams{"vision": {GPUs: 4}}},
		"lender with a guarantee it keeps": {teams: policy.Teams{"vision": {GPUs: 4}, "nlp": {GPUs: 4}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).nodes(1, 8).
				running(task{id: "nlp-1", team: "nlp", class: domain.Low}, on("n1", 0, 1, 2, 3)).
				running(task{id: "nlp-2", team: "nlp", class: domain.Low}, on("n1", 4, 5, 6, 7)).
				submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
			ps := preempts(c.plan(policy.Options{Teams: tc.teams}))
			if len(ps) != 1 {
				t.Fatalf("got %d preemptions, want 1", len(ps))
			}
			diff := ""
			for _, w := range []string{"vision-low", "team guarantee", "vision", "nlp"} {
				if !strings.Contains(ps[0].Reason, w) {
					diff += "reason " + ps[0].Reason + " does not name " + w + "\n"
				}
			}
			if strings.Contains(ps[0].Reason, policy.CriticalOnly) {
				diff += "reason " + ps[0].Reason + " names critical-only for a LOW preemptor\n"
			}
			if diff != "" {
				t.Error(diff)
			}
		})
	}
}

// A team under its guarantee, played over passes: it preempts a borrower,
// holds the GPUs while the borrower checkpoints, and starts when it exits.
func TestReclaimPlayed(t *testing.T) {
	c := cluster(t).nodes(1, 8).
		running(task{id: "nlp-1", team: "nlp", class: domain.High}, on("n1", 0, 1, 2, 3)).
		running(task{id: "nlp-2", team: "nlp", class: domain.High}, on("n1", 4, 5, 6, 7)).
		submit(task{id: "vision-low", team: "vision", class: domain.Low, gpus: 4})
	opts := policy.Options{Teams: policy.Teams{"vision": {GPUs: 4}}, Explain: true}
	steps := []struct {
		then func()
		want []string
	}{
		{want: []string{"preempt nlp-2 for vision-low"}},
		{want: []string{}}, // nlp-2 checkpoints
		{then: func() { c.exit("nlp-2") }, want: []string{"dispatch vision-low n1[4-7]"}},
		{want: []string{}}, // vision at its guarantee; nlp-2 requeued waits
	}
	for i, s := range steps {
		if s.then != nil {
			s.then()
		}
		r := c.plan(opts)
		if diff := cmp.Diff(s.want, summary(r.Decisions)); diff != "" {
			t.Fatalf("step %d (-want +got):\n%s", i+1, diff)
		}
		c.play(r)
	}
	if diff := cmp.Diff(map[string]int{"vision": 4, "nlp": 4}, c.usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// Under ladder with guarantees, a preemption that took a team under its
// guarantee would undo itself: the victim, requeued, is served first (its
// team is under its guarantee) and takes its GPU back, and the preemptor
// preempts again, every pass. Only a CRITICAL task takes another team
// below its guarantee.
func TestLadderRespectsGuarantees(t *testing.T) {
	c := cluster(t).nodes(1, 2).
		running(task{id: "b1", team: "b", class: domain.Low}, on("n1", 0)).
		running(task{id: "b2", team: "b", class: domain.Low}, on("n1", 1)).
		submit(task{id: "a-med", team: "a", class: domain.Medium})
	opts := policy.Options{Preemption: policy.Ladder, Teams: policy.Teams{"b": {GPUs: 2}}}
	got := []string{}
	for pass := 0; pass < 4; pass++ {
		r := c.plan(opts)
		got = append(got, summary(r.Decisions)...)
		c.play(r).exitAll()
	}
	if diff := cmp.Diff([]string{}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
