package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

func TestPreemption(t *testing.T) {
	ladder := policy.Options{Preemption: policy.Ladder}
	full := func(c *harness, victim task) { c.nodes(1, 8).running(victim, on("n1", span(0, 8)...)) }
	cases := map[string]scenario{
		"critical-only: HIGH does not preempt LOW": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low})
				c.submit(task{id: "high", class: domain.High, gpus: 8})
			},
			want: []string{},
		},
		"critical-only: CRITICAL preempts LOW": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low})
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{"preempt low for crit"},
		},
		"critical-only: CRITICAL preempts HIGH": {
			setup: func(c *harness) {
				full(c, task{id: "high", class: domain.High})
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{"preempt high for crit"},
		},
		"critical-only is the default and names itself": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low})
				c.submit(task{id: "high", class: domain.High, gpus: 8})
			},
			opts: policy.Options{Preemption: policy.CriticalOnly},
			want: []string{},
		},
		"ladder: HIGH preempts LOW": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low})
				c.submit(task{id: "high", class: domain.High, gpus: 8})
			},
			opts: ladder,
			want: []string{"preempt low for high"},
		},
		"ladder: MEDIUM preempts LOW": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low})
				c.submit(task{id: "med", class: domain.Medium, gpus: 8})
			},
			opts: ladder,
			want: []string{"preempt low for med"},
		},
		"ladder: MEDIUM does not preempt MEDIUM": {
			setup: func(c *harness) {
				full(c, task{id: "med1", class: domain.Medium})
				c.submit(task{id: "med2", class: domain.Medium, gpus: 8})
			},
			opts: ladder,
			want: []string{},
		},
		"ladder: LOW preempts nobody": {
			setup: func(c *harness) {
				full(c, task{id: "low1", class: domain.Low})
				c.submit(task{id: "low2", class: domain.Low, gpus: 8})
			},
			opts: ladder,
			want: []string{},
		},
		"ladder: HIGH does not preempt HIGH but takes the LOW beside it": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "high1", class: domain.High}, on("n1", 0, 1, 2, 3)).
					running(task{id: "low", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					submit(task{id: "high2", class: domain.High, gpus: 4})
			},
			opts: ladder,
			want: []string{"preempt low for high2"},
		},
		"ladder: CRITICAL preempts HIGH": {
			setup: func(c *harness) {
				full(c, task{id: "high", class: domain.High})
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			opts: ladder,
			want: []string{"preempt high for crit"},
		},
		"a non-preemptible task is never a victim": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low, noPreempt: true})
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{},
		},
		"a non-preemptible task is never a victim under ladder": {
			setup: func(c *harness) {
				full(c, task{id: "low", class: domain.Low, noPreempt: true})
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			opts: ladder,
			want: []string{},
		},
		"CRITICAL is never a victim, even submitted preemptible": {
			setup: func(c *harness) {
				full(c, task{id: "crit1", class: domain.Critical})
				c.submit(task{id: "crit2", class: domain.Critical, gpus: 8})
			},
			opts: ladder,
			want: []string{},
		},
		"a dispatched task not yet started is not a victim": {
			setup: func(c *harness) {
				c.nodes(1, 8).submit(task{id: "low", class: domain.Low, gpus: 8})
				c.emit(dispatchOnly("low", on("n1", span(0, 8)...)))
				c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{},
		},
		"only as many victims as needed, beside free GPUs": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "a", class: domain.Low}, on("n1", 0, 1)).
					running(task{id: "b", class: domain.Low}, on("n1", 2, 3)).
					running(task{id: "c", class: domain.Low}, on("n1", 4, 5)).
					submit(task{id: "crit", class: domain.Critical, gpus: 4})
			},
			// Two GPUs are free; one victim of two GPUs is enough. Equal
			// class and lost work: the latest submitted goes first.
			want: []string{"preempt c for crit"},
		},
		"no preemption when even all victims would not make room": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "low", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "fixed", class: domain.Low, noPreempt: true}, on("n1", 4, 5, 6, 7)).
					submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{},
		},
		"victims for a gang across nodes": {
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(task{id: "a", class: domain.Low}, on("n1", span(0, 8)...)).
					running(task{id: "b", class: domain.Low}, on("n2", span(0, 8)...)).
					submit(task{id: "crit", class: domain.Critical, gpus: 16})
			},
			want: []string{"preempt b for crit", "preempt a for crit"},
		},
		"CRITICAL placed on free GPUs preempts nobody": {
			setup: func(c *harness) {
				c.nodes(2, 8).running(task{id: "a", class: domain.Low}, on("n1", span(0, 8)...)).
					submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			want: []string{"dispatch crit n2[0-7]"},
		},
	}
	runScenarios(t, cases)
}

// Victim choice, as the issue orders it: the fewest tasks first, then the
// lowest class, then the least work lost since the last checkpoint.
func TestVictimChoice(t *testing.T) {
	crit := task{id: "crit", class: domain.Critical, gpus: 8}
	cases := map[string]scenario{
		"fewest tasks: one 8-GPU LOW rather than two 4-GPU LOWs": {
			setup: func(c *harness) {
				c.nodes(2, 8).running(task{id: "one", class: domain.Low}, on("n2", span(0, 8)...))
				c.advance(time.Hour).
					running(task{id: "two-a", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "two-b", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					advance(time.Minute).submit(crit)
			},
			// two-a and two-b lose less work, yet two tasks are more than one.
			want: []string{"preempt one for crit"},
		},
		"fewest tasks: one MEDIUM rather than two LOWs": {
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(task{id: "low-a", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "low-b", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					running(task{id: "med", class: domain.Medium}, on("n2", span(0, 8)...)).
					submit(crit)
			},
			want: []string{"preempt med for crit"},
		},
		"fewest tasks on one node: the task that makes room alone": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "low", class: domain.Low}, on("n1", 0, 1)).
					running(task{id: "med", class: domain.Medium}, on("n1", span(2, 8)...)).
					submit(task{id: "crit", class: domain.Critical, gpus: 6})
			},
			// Preempting med alone frees 6 GPUs; low is not needed.
			want: []string{"preempt med for crit"},
		},
		"lowest class among equally few: victim on the first node": {
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(task{id: "low", class: domain.Low}, on("n1", span(0, 8)...)).
					running(task{id: "med", class: domain.Medium}, on("n2", span(0, 8)...)).
					submit(crit)
			},
			want: []string{"preempt low for crit"},
		},
		"lowest class among equally few: victim on a later node": {
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(task{id: "med", class: domain.Medium}, on("n1", span(0, 8)...)).
					running(task{id: "low", class: domain.Low}, on("n2", span(0, 8)...)).
					submit(crit)
			},
			want: []string{"preempt low for crit"},
		},
		"lowest class on one node": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "med", class: domain.Medium}, on("n1", 0, 1, 2, 3)).
					running(task{id: "low", class: domain.Low}, on("n1", 4, 5, 6, 7)).
					submit(task{id: "crit", class: domain.Critical, gpus: 4})
			},
			want: []string{"preempt low for crit"},
		},
		"least lost work on one node: the recent checkpoint": {
			setup: func(c *harness) {
				c.nodes(1, 8).
					running(task{id: "ckpt", class: domain.Low}, on("n1", 0, 1, 2, 3)).
					running(task{id: "no-ckpt", class: domain.Low}, on("n1", 4, 5, 6, 7))
				c.advance(3 * time.Hour).checkpoint("ckpt").advance(10 * time.Minute).
					submit(task{id: "crit", class: domain.Critical, gpus: 4})
			},
			want: []string{"preempt ckpt for crit"},
		},
		"least lost work on one node: the later start": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "early", class: domain.Low}, on("n1", 0, 1, 2, 3))
				c.advance(time.Hour).running(task{id: "late", class: domain.Low}, on("n1", 4, 5, 6, 7))
				c.advance(time.Hour).submit(task{id: "crit", class: domain.Critical, gpus: 4})
			},
			want: []string{"preempt late for crit"},
		},
		"lost work counts GPUs: 1 GPU for 2 h loses less than 4 GPUs for 1 h": {
			setup: func(c *harness) {
				c.nodes(1, 5).running(task{id: "one-gpu", class: domain.Low}, on("n1", 0))
				c.advance(time.Hour).running(task{id: "four-gpus", class: domain.Low}, on("n1", 1, 2, 3, 4))
				c.advance(time.Hour).submit(task{id: "crit", class: domain.Critical, gpus: 1})
			},
			want: []string{"preempt one-gpu for crit"},
		},
		"least lost work among equally few: victim on a later node": {
			setup: func(c *harness) {
				c.nodes(2, 8).running(task{id: "old", class: domain.Low}, on("n1", span(0, 8)...))
				c.advance(2*time.Hour).running(task{id: "new", class: domain.Low}, on("n2", span(0, 8)...))
				c.advance(time.Minute).submit(crit)
			},
			want: []string{"preempt new for crit"},
		},
		"class before lost work": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "low-old", class: domain.Low}, on("n1", 0, 1, 2, 3))
				c.advance(5*time.Hour).running(task{id: "med-new", class: domain.Medium}, on("n1", 4, 5, 6, 7))
				c.advance(time.Minute).submit(task{id: "crit", class: domain.Critical, gpus: 4})
			},
			want: []string{"preempt low-old for crit"},
		},
	}
	runScenarios(t, cases)
}

// A preemption's reason says who preempts, for which class, under which
// policy.
func TestPreemptionReason(t *testing.T) {
	cases := map[string]struct {
		opts     policy.Options
		preemptr task
		want     []string // substrings of the reason
	}{
		"critical-only": {
			preemptr: task{id: "crit-7", class: domain.Critical, gpus: 8},
			want:     []string{"crit-7", "critical", policy.CriticalOnly},
		},
		"ladder": {
			opts:     policy.Options{Preemption: policy.Ladder},
			preemptr: task{id: "high-3", class: domain.High, gpus: 8},
			want:     []string{"high-3", "high", policy.Ladder},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t).nodes(1, 8).running(task{id: "low", class: domain.Low}, on("n1", span(0, 8)...)).submit(tc.preemptr)
			ps := preempts(c.plan(tc.opts))
			if len(ps) != 1 {
				t.Fatalf("got %d preemptions, want 1: %v", len(ps), ps)
			}
			if ps[0].TaskID != "low" || ps[0].For != tc.preemptr.id {
				t.Errorf("preempt %s for %s, want low for %s", ps[0].TaskID, ps[0].For, tc.preemptr.id)
			}
			for _, w := range tc.want {
				if !strings.Contains(ps[0].Reason, w) {
					t.Errorf("reason %q does not name %q", ps[0].Reason, w)
				}
			}
			if got := policy.New(tc.opts).Name(); got != tc.want[2] {
				t.Errorf("Name() = %q, want %q", got, tc.want[2])
			}
		})
	}
}

// Once victims are yielding for a task, later passes preempt nobody else
// for it, hold the GPUs it will need, and place it when the victims exit.
func TestPreemptionIsNotRepeated(t *testing.T) {
	c := cluster(t).nodes(2, 8).running(task{id: "v1", class: domain.Low}, on("n2", span(0, 8)...))
	c.advance(time.Hour).running(task{id: "v2", class: domain.Low}, on("n1", span(0, 8)...)).
		submit(task{id: "crit", class: domain.Critical, gpus: 8})
	opts := policy.Options{Explain: true}

	// 1. The first pass preempts one victim.
	r := c.plan(opts)
	if diff := cmp.Diff([]string{"preempt v2 for crit"}, summary(r.Decisions)); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	c.play(r)

	// 2. While v2 checkpoints, nothing more is preempted, and crit says why.
	c.advance(time.Minute)
	for i := 0; i < 3; i++ {
		r = c.plan(opts)
		if diff := cmp.Diff([]string{}, summary(r.Decisions)); diff != "" {
			t.Fatalf("pass %d while v2 yields (-want +got):\n%s", i+2, diff)
		}
		want := policy.Wait{Position: 1, Reason: policy.ReasonPreempting, Blockers: []string{"v2"}}
		if diff := cmp.Diff(want, r.Waiting["crit"]); diff != "" {
			t.Errorf("crit's wait (-want +got):\n%s", diff)
		}
	}

	// 3. A smaller task arriving meanwhile does not take the yielding GPUs.
	c.submit(task{id: "small", class: domain.High, gpus: 1})
	r = c.plan(opts)
	if diff := cmp.Diff([]string{}, summary(r.Decisions)); diff != "" {
		t.Fatalf("pass with small (-want +got):\n%s", diff)
	}

	// 4. v2 exits and is requeued; crit takes its GPUs.
	c.exit("v2")
	r = c.plan(opts)
	if diff := cmp.Diff([]string{"dispatch crit n1[0-7]"}, summary(r.Decisions)); diff != "" {
		t.Fatalf("after v2 exits (-want +got):\n%s", diff)
	}
}

// Victims yielding for a task that cannot use all their GPUs leave the
// rest free for others: the hold is for the preemptor's placement only.
func TestPreemptionHoldsOnlyWhatItNeeds(t *testing.T) {
	c := cluster(t).nodes(1, 8).
		running(task{id: "v", class: domain.Low}, on("n1", span(0, 4)...)).
		preempting("v", "crit").
		submit(task{id: "crit", class: domain.Critical, gpus: 6}, task{id: "small", class: domain.Low, gpus: 2})
	r := c.plan(policy.Options{Explain: true})
	// crit takes GPUs 0-5 once v exits; 6 and 7 are free now for small.
	if diff := cmp.Diff([]string{"dispatch small n1[6 7]"}, summary(r.Decisions)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
