package policy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// Every reason code, as Explain reports it for one queued task.
func TestReasons(t *testing.T) {
	cases := map[string]struct {
		setup func(c *harness)
		opts  policy.Options
		task  string
		want  policy.Wait
	}{
		"no-capacity: the holders that end first": {
			setup: func(c *harness) {
				c.nodes(1, 4).
					running(task{id: "r-late", pred: 3 * time.Hour, noPreempt: true}, on("n1", 0, 1)).
					running(task{id: "r-soon", pred: time.Hour, noPreempt: true}, on("n1", 2, 3)).
					submit(task{id: "q", gpus: 4})
			},
			task: "q",
			want: policy.Wait{Position: 1, Reason: policy.ReasonNoCapacity, Blockers: []string{"r-soon", "r-late"}, ReservedAt: t0.Add(3 * time.Hour)},
		},
		"higher-priority-ahead": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "r", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(task{id: "high", class: domain.High, gpus: 4}, task{id: "low", class: domain.Low, gpus: 2})
			},
			task: "low",
			want: policy.Wait{Position: 2, Reason: policy.ReasonHigherAhead, Blockers: []string{"high"}},
		},
		"team-over-guarantee": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "r", team: "ml", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(
						task{id: "nlp-high", team: "nlp", class: domain.High, gpus: 2},
						task{id: "vision-low", team: "vision", class: domain.Low, gpus: 2},
					)
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 2}}},
			task: "nlp-high",
			want: policy.Wait{Position: 2, Reason: policy.ReasonTeamOver, Blockers: []string{"vision-low"}},
		},
		"reserved-for-another": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "r", pred: time.Hour, noPreempt: true}, on("n1", span(0, 6)...)).
					submit(task{id: "head", gpus: 8}, task{id: "long", class: domain.Low, gpus: 2, pred: 2 * time.Hour})
			},
			task: "long",
			want: policy.Wait{Position: 2, Reason: policy.ReasonReserved, Blockers: []string{"head"}},
		},
		"constraint-unsatisfiable: model": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).submit(task{id: "q", model: "H100"})
			},
			task: "q",
			want: policy.Wait{Position: 1, Reason: policy.ReasonUnsatisfiable, Blockers: []string{}},
		},
		"constraint-unsatisfiable: memory": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).submit(task{id: "q", mem: 81920})
			},
			task: "q",
			want: policy.Wait{Position: 1, Reason: policy.ReasonUnsatisfiable, Blockers: []string{}},
		},
		"constraint-unsatisfiable: more GPUs than the cluster has": {
			setup: func(c *harness) { c.nodes(2, 8).submit(task{id: "q", gpus: 17}) },
			task:  "q",
			want:  policy.Wait{Position: 1, Reason: policy.ReasonUnsatisfiable, Blockers: []string{}},
		},
		"nodes-unhealthy: an unhealthy GPU": {
			setup: func(c *harness) { c.nodes(1, 8).unhealthy("n1", 3).submit(task{id: "q", gpus: 8}) },
			task:  "q",
			want:  policy.Wait{Position: 1, Reason: policy.ReasonNodesUnhealthy, Blockers: []string{}},
		},
		"node-drained: it would fit with the drained node back": {
			setup: func(c *harness) { c.nodes(2, 8).drain("n2").submit(task{id: "q", gpus: 16}) },
			task:  "q",
			want:  policy.Wait{Position: 1, Reason: policy.ReasonNodeDrained, Blockers: []string{}},
		},
		"nodes-unhealthy: a drained node would not be enough": {
			setup: func(c *harness) { c.nodes(2, 8).drain("n2").lose("n1").submit(task{id: "q", gpus: 16}) },
			task:  "q",
			want:  policy.Wait{Position: 1, Reason: policy.ReasonNodesUnhealthy, Blockers: []string{}},
		},
		"nodes-unhealthy: the only fitting node is lost": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).node("n2", 8, "H100", 81920).lose("n2").submit(task{id: "q", model: "H100"})
			},
			task: "q",
			want: policy.Wait{Position: 1, Reason: policy.ReasonNodesUnhealthy, Blockers: []string{}},
		},
		"preempting-for-it": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "v", class: domain.Low}, on("n1", span(0, 8)...)).
					submit(task{id: "crit", class: domain.Critical, gpus: 8})
			},
			task: "crit",
			want: policy.Wait{Position: 1, Reason: policy.ReasonPreempting, Blockers: []string{"v"}},
		},
		"a task skipped as unsatisfiable blocks nobody": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(task{id: "r", noPreempt: true}, on("n1", 0, 1, 2, 3)).
					submit(task{id: "high", class: domain.High, model: "B200"}, task{id: "low", class: domain.Low})
			},
			task: "low",
			want: policy.Wait{Position: 2, Reason: policy.ReasonNoCapacity, Blockers: []string{"r"}, ReservedAt: t0.Add(time.Hour)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t)
			tc.setup(c)
			tc.opts.Explain = true
			r := c.plan(tc.opts)
			got, ok := r.Waiting[tc.task]
			if !ok {
				t.Fatalf("%s not in Waiting; decisions %v", tc.task, summary(r.Decisions))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Without Explain there is no Waiting; with it, every queued task that
// does not start has a wait with a known reason.
func TestExplainCoversTheQueue(t *testing.T) {
	c := cluster(t).nodes(2, 4).
		running(task{id: "r", noPreempt: true}, on("n1", 0, 1, 2)).
		submit(
			task{id: "a", gpus: 4}, task{id: "b", gpus: 2}, task{id: "c", model: "B200"},
			task{id: "d", gpus: 8}, task{id: "e"}, task{id: "f", gpus: 3},
		)
	if r := c.plan(policy.Options{}); r.Waiting != nil {
		t.Errorf("Waiting without Explain: %v", r.Waiting)
	}
	r := c.plan(policy.Options{Explain: true})
	placed := map[string]bool{}
	for _, id := range dispatched(r) {
		placed[id] = true
	}
	for _, q := range c.st.Queued() {
		w, ok := r.Waiting[q.ID]
		switch {
		case placed[q.ID] && ok:
			t.Errorf("%s both dispatched and waiting", q.ID)
		case !placed[q.ID] && !ok:
			t.Errorf("%s neither dispatched nor waiting", q.ID)
		case ok && !knownReason[w.Reason]:
			t.Errorf("%s: unknown reason %q", q.ID, w.Reason)
		}
	}
}

var knownReason = map[string]bool{
	policy.ReasonNoCapacity: true, policy.ReasonHigherAhead: true, policy.ReasonTeamOver: true,
	policy.ReasonReserved: true, policy.ReasonUnsatisfiable: true, policy.ReasonNodesUnhealthy: true,
	policy.ReasonPreempting: true, policy.ReasonNodeDrained: true,
}
