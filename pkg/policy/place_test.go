package policy_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
)

func TestPlacement(t *testing.T) {
	fixed := func(id string) task { return task{id: id, noPreempt: true} }
	cases := map[string]scenario{
		"best fit: the fitting node with the fewest free GPUs": {
			setup: func(c *harness) {
				c.nodes(3, 8).
					running(fixed("r2"), on("n2", span(0, 5)...)). // n2: 3 free
					running(fixed("r3"), on("n3", span(0, 6)...)). // n3: 2 free
					submit(task{id: "q", gpus: 3})
			},
			want: []string{"dispatch q n2[5-7]"},
		},
		"best fit: the exact fit wins over a larger hole": {
			setup: func(c *harness) {
				c.nodes(3, 8).
					running(fixed("r2"), on("n2", span(0, 5)...)).
					running(fixed("r3"), on("n3", span(0, 6)...)).
					submit(task{id: "q", gpus: 2})
			},
			want: []string{"dispatch q n3[6 7]"},
		},
		"best fit: ties go to the first node by name": {
			setup: func(c *harness) {
				c.node("b", 4, "H100", 81920).node("a", 4, "H100", 81920).submit(task{id: "q", gpus: 2})
			},
			want: []string{"dispatch q a[0 1]"},
		},
		"best fit: successive tasks fill the fullest node first": {
			setup: func(c *harness) {
				c.nodes(2, 4).running(fixed("r1"), on("n1", 0)).
					submit(task{id: "q1"}, task{id: "q2"}, task{id: "q3", gpus: 2})
			},
			want: []string{"dispatch q1 n1[1]", "dispatch q2 n1[2]", "dispatch q3 n2[0 1]"},
		},
		"a task that fits one node is never split": {
			setup: func(c *harness) {
				c.nodes(2, 8).
					running(fixed("r1"), on("n1", span(0, 6)...)). // 2 free
					running(fixed("r2"), on("n2", span(0, 5)...)). // 3 free
					submit(task{id: "q", gpus: 4})
			},
			want: []string{},
		},
		"gang: 16 GPUs on 3×8 with one partly used takes the two whole nodes": {
			setup: func(c *harness) {
				c.nodes(3, 8).running(fixed("r1"), on("n1", 0, 1)).submit(task{id: "q", gpus: 16})
			},
			want: []string{"dispatch q n2[0-7]+n3[0-7]"},
		},
		"gang: whole nodes plus the remainder on the best-fitting node": {
			setup: func(c *harness) {
				c.nodes(3, 8).
					running(fixed("r2"), on("n2", 0, 1)).    // 6 free
					running(fixed("r3"), on("n3", 0, 1, 2)). // 5 free
					submit(task{id: "q", gpus: 12})
			},
			want: []string{"dispatch q n1[0-7]+n3[3-6]"},
		},
		"gang: a whole node larger than the remainder is not taken whole": {
			setup: func(c *harness) {
				c.nodes(3, 8).running(fixed("r3"), on("n3", 0, 1, 2, 3)).submit(task{id: "q", gpus: 12})
			},
			want: []string{"dispatch q n1[0-7]+n3[4-7]"},
		},
		"gang: all or nothing": {
			setup: func(c *harness) {
				c.nodes(2, 8).running(fixed("r2"), on("n2", 0)).submit(task{id: "q", gpus: 16})
			},
			want: []string{},
		},
		"gang: partly used nodes are not pooled": {
			// 6+6+4 free GPUs but no whole node: the gang waits.
			setup: func(c *harness) {
				c.nodes(3, 8).
					running(fixed("r1"), on("n1", 0, 1)).
					running(fixed("r2"), on("n2", 0, 1)).
					running(fixed("r3"), on("n3", 0, 1, 2, 3)).
					submit(task{id: "q", gpus: 10})
			},
			want: []string{},
		},
		"gang: the whole cluster": {
			setup: func(c *harness) { c.nodes(3, 8).submit(task{id: "q", gpus: 24}) },
			want:  []string{"dispatch q n1[0-7]+n2[0-7]+n3[0-7]"},
		},
		"gang blocked, the next task still fits": {
			setup: func(c *harness) {
				c.nodes(2, 8).running(fixed("r2"), on("n2", 0)).
					submit(task{id: "gang", gpus: 16, class: domain.High}, task{id: "small", gpus: 2, class: domain.Low, pred: time.Minute})
			},
			// small is predicted to end at once, before any reservation.
			want: []string{"dispatch small n2[1 2] backfill"},
		},
		"model constraint": {
			setup: func(c *harness) {
				c.node("n1", 8, "NVIDIA A100-SXM4-40GB", 40960).node("n2", 8, "NVIDIA H100 80GB HBM3", 81920).
					submit(task{id: "q", gpus: 2, model: "h100"})
			},
			want: []string{"dispatch q n2[0 1]"},
		},
		"model constraint: best fit among fitting nodes only": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).node("n2", 8, "H100", 81920).node("n3", 8, "H100", 81920).
					running(fixed("r1"), on("n1", span(0, 6)...)).
					running(fixed("r3"), on("n3", span(0, 4)...)).
					submit(task{id: "q", gpus: 2, model: "H100"})
			},
			want: []string{"dispatch q n3[4 5]"},
		},
		"memory constraint": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).node("n2", 8, "A100", 81920).
					submit(task{id: "q", gpus: 2, mem: 80000})
			},
			want: []string{"dispatch q n2[0 1]"},
		},
		"memory constraint: exactly the minimum fits": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).submit(task{id: "q", mem: 40960})
			},
			want: []string{"dispatch q n1[0]"},
		},
		"constraints apply to every node of a gang": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).node("n2", 8, "H100", 81920).node("n3", 8, "H100", 81920).
					submit(task{id: "q", gpus: 16, model: "H100"})
			},
			want: []string{"dispatch q n2[0-7]+n3[0-7]"},
		},
		"constraint unsatisfiable: nothing placed": {
			setup: func(c *harness) {
				c.node("n1", 8, "A100", 40960).submit(task{id: "q", model: "B200"}, task{id: "r", mem: 99999})
			},
			want: []string{},
		},
		"unhealthy GPUs are never used": {
			setup: func(c *harness) {
				c.node("n1", 8, "H100", 81920, 0, 3).submit(task{id: "q", gpus: 6})
			},
			want: []string{"dispatch q n1[1 2 4 5 6 7]"},
		},
		"a GPU reported unhealthy later is not used": {
			setup: func(c *harness) {
				c.nodes(2, 4).unhealthy("n1", 1).submit(task{id: "q", gpus: 3}, task{id: "r", gpus: 4})
			},
			want: []string{"dispatch q n1[0 2 3]", "dispatch r n2[0-3]"},
		},
		"best fit counts healthy free GPUs only": {
			setup: func(c *harness) {
				c.nodes(2, 4).unhealthy("n2", 0, 1).submit(task{id: "q", gpus: 2})
			},
			want: []string{"dispatch q n2[2 3]"},
		},
		"gang: a node whose healthy GPUs are all free counts as whole": {
			setup: func(c *harness) {
				c.nodes(2, 8).unhealthy("n1", 7).submit(task{id: "q", gpus: 15})
			},
			want: []string{"dispatch q n1[0-6]+n2[0-7]"},
		},
		"drained nodes are avoided": {
			setup: func(c *harness) {
				c.nodes(2, 8).drain("n1").submit(task{id: "q", gpus: 2})
			},
			want: []string{"dispatch q n2[0 1]"},
		},
		"lost nodes are avoided": {
			setup: func(c *harness) {
				c.nodes(2, 8).lose("n2").submit(task{id: "q", gpus: 8}, task{id: "r", gpus: 8})
			},
			want: []string{"dispatch q n1[0-7]"},
		},
		"a drained node does not join a gang": {
			setup: func(c *harness) {
				c.nodes(3, 8).drain("n2").submit(task{id: "q", gpus: 24}, task{id: "r", gpus: 16})
			},
			want: []string{"dispatch r n1[0-7]+n3[0-7]"},
		},
		"a node back up after loss is used again": {
			setup: func(c *harness) {
				c.nodes(1, 4).lose("n1").node("n1", 4, "H100", 81920).submit(task{id: "q", gpus: 4})
			},
			want: []string{"dispatch q n1[0-3]"},
		},
		"GPUs held by a cancelled task that still runs are not free": {
			setup: func(c *harness) {
				c.nodes(1, 4).running(fixed("r1"), on("n1", 0, 1)).
					emit(cancelled("r1")).submit(task{id: "q", gpus: 3}, task{id: "s", gpus: 2})
			},
			want: []string{"dispatch s n1[2 3] backfill"},
		},
	}
	runScenarios(t, cases)
}
