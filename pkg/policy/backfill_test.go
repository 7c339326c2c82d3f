package policy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The EASY backfill cases share a cluster: n1 has 8 GPUs, 6 held by r1
// for 2 more hours; n2 has 8, 4 held by r2 for 5 hours. The head task
// needs 8: it is reserved all of n1 from now+2h.
func easy(c *harness) {
	c.nodes(2, 8).
		running(task{id: "r1", pred: 2 * time.Hour, noPreempt: true}, on("n1", span(0, 6)...)).
		running(task{id: "r2", pred: 5 * time.Hour, noPreempt: true}, on("n2", span(0, 4)...)).
		submit(task{id: "head", class: domain.High, gpus: 8, pred: time.Hour})
}

// onlyReserved is the EASY cluster with n2's last 4 GPUs busy for 10 h:
// the only free GPUs, n1[6 7], are reserved for the head from +2 h, and
// the given tasks are submitted behind it.
func onlyReserved(ts ...task) func(c *harness) {
	return func(c *harness) {
		easy(c)
		c.running(task{id: "r3", pred: 10 * time.Hour, noPreempt: true}, on("n2", 4, 5, 6, 7)).submit(ts...)
	}
}

func TestBackfill(t *testing.T) {
	cases := map[string]scenario{
		"a short task ending before the reservation takes reserved GPUs": {
			setup: onlyReserved(task{id: "short", class: domain.Low, gpus: 2, pred: time.Hour}),
			want:  []string{"dispatch short n1[6 7] backfill"},
		},
		"a task ending exactly at the reservation backfills": {
			setup: onlyReserved(task{id: "exact", class: domain.Low, gpus: 2, pred: 2 * time.Hour}),
			want:  []string{"dispatch exact n1[6 7] backfill"},
		},
		"a long task that would use the reserved GPUs does not start": {
			setup: onlyReserved(task{id: "long", class: domain.Low, gpus: 2, pred: 3 * time.Hour}),
			want:  []string{},
		},
		"a long task that leaves the reserved GPUs free starts": {
			setup: func(c *harness) {
				easy(c)
				c.submit(task{id: "long", class: domain.Low, gpus: 4, pred: 10 * time.Hour})
			},
			want: []string{"dispatch long n2[4-7] backfill"},
		},
		"a long task prefers unreserved GPUs to reserved ones": {
			setup: func(c *harness) {
				easy(c)
				c.submit(task{id: "long", class: domain.Low, gpus: 2, pred: 10 * time.Hour})
			},
			want: []string{"dispatch long n2[4 5] backfill"},
		},
		"the reservation counts the holder's elapsed time": {
			// r1 started 90 min ago with 2 h predicted: it ends in 30 min.
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "r1", pred: 2 * time.Hour, noPreempt: true}, on("n1", span(0, 6)...))
				c.advance(90*time.Minute).submit(
					task{id: "head", gpus: 8},
					task{id: "45m", class: domain.Low, gpus: 2, pred: 45 * time.Minute},
					task{id: "20m", class: domain.Low, gpus: 2, pred: 20 * time.Minute},
				)
			},
			want: []string{"dispatch 20m n1[6 7] backfill"},
		},
		"without a prediction the estimate counts": {
			setup: func(c *harness) {
				c.nodes(1, 8).running(task{id: "r1", hours: 2, noPreempt: true}, on("n1", span(0, 6)...)).
					submit(
						task{id: "head", gpus: 8},
						task{id: "3h", class: domain.Low, gpus: 2, hours: 3},
						task{id: "1h", class: domain.Low, gpus: 2, hours: 1},
					)
			},
			want: []string{"dispatch 1h n1[6 7] backfill"},
		},
		"shortest-job backfill: of two candidates for the same GPUs, the shorter goes first": {
			setup: onlyReserved(
				task{id: "90m", class: domain.Low, gpus: 2, pred: 90 * time.Minute},
				task{id: "30m", class: domain.Low, gpus: 2, pred: 30 * time.Minute}),
			opts: policy.Options{Backfill: policy.BackfillShortest},
			want: []string{"dispatch 30m n1[6 7] backfill"},
		},
		"by default the candidates in queue order (classic EASY)": {
			setup: onlyReserved(
				task{id: "90m", class: domain.Low, gpus: 2, pred: 90 * time.Minute},
				task{id: "30m", class: domain.Low, gpus: 2, pred: 30 * time.Minute}),
			want: []string{"dispatch 90m n1[6 7] backfill"},
		},
		"shortest-job backfill: shortest by service, GPUs × run time": {
			setup: onlyReserved(
				task{id: "2x40m", class: domain.Low, gpus: 2, pred: 40 * time.Minute},
				task{id: "1x60m", class: domain.Low, gpus: 1, pred: 60 * time.Minute}),
			opts: policy.Options{Backfill: policy.BackfillShortest},
			want: []string{"dispatch 1x60m n1[6] backfill"},
		},
		"shortest-job backfill: a higher class is still tried first": {
			setup: onlyReserved(
				task{id: "low-30m", class: domain.Low, gpus: 2, pred: 30 * time.Minute},
				task{id: "med-90m", class: domain.Medium, gpus: 2, pred: 90 * time.Minute}),
			opts: policy.Options{Backfill: policy.BackfillShortest},
			want: []string{"dispatch med-90m n1[6 7] backfill"},
		},
		"tasks ahead of the blocked one start normally": {
			setup: func(c *harness) {
				easy(c)
				c.submit(task{id: "crit", class: domain.Critical, gpus: 2, pred: 10 * time.Hour})
			},
			want: []string{"dispatch crit n1[6 7]"},
		},
		"NoBackfill: strict order, nothing passes the blocked task": {
			setup: onlyReserved(task{id: "short", class: domain.Low, gpus: 2, pred: time.Hour}),
			opts:  policy.Options{NoBackfill: true},
			want:  []string{},
		},
		"NoBackfill: not even off the reserved GPUs": {
			setup: func(c *harness) {
				easy(c)
				c.submit(task{id: "long", class: domain.Low, gpus: 4, pred: 10 * time.Hour})
			},
			opts: policy.Options{NoBackfill: true},
			want: []string{},
		},
		"NoBackfill: tasks ahead of the blocked one start": {
			setup: func(c *harness) {
				easy(c)
				c.submit(
					task{id: "crit", class: domain.Critical, gpus: 2},
					task{id: "low", class: domain.Low, gpus: 1},
				)
			},
			opts: policy.Options{NoBackfill: true},
			want: []string{"dispatch crit n1[6 7]"},
		},
	}
	runScenarios(t, cases)
}

// The reservation itself, as Explain reports it.
func TestReservation(t *testing.T) {
	c := cluster(t)
	easy(c)
	c.running(task{id: "r3", pred: 10 * time.Hour, noPreempt: true}, on("n2", 4, 5, 6, 7)).
		submit(task{id: "long", class: domain.Low, gpus: 2, pred: 3 * time.Hour})
	r := c.plan(policy.Options{Explain: true})
	want := map[string]policy.Wait{
		"head": {Position: 1, Reason: policy.ReasonNoCapacity, Blockers: []string{"r1", "r2", "r3"}, ReservedAt: c.now.Add(2 * time.Hour)},
		"long": {Position: 2, Reason: policy.ReasonReserved, Blockers: []string{"head"}},
	}
	if diff := cmp.Diff(want, r.Waiting); diff != "" {
		t.Errorf("waiting (-want +got):\n%s", diff)
	}
}

// Played forward, the head starts at its reservation while backfilled
// work runs around it.
func TestBackfillPlayed(t *testing.T) {
	c := cluster(t)
	easy(c)
	c.submit(
		task{id: "short", class: domain.Low, gpus: 2, pred: time.Hour},
		task{id: "long", class: domain.Low, gpus: 2, pred: 10 * time.Hour},
	)
	opts := policy.Options{Explain: true}
	r := c.plan(opts)
	reservedAt := r.Waiting["head"].ReservedAt
	if diff := cmp.Diff([]string{"dispatch short n2[4 5] backfill", "dispatch long n2[6 7] backfill"}, summary(r.Decisions)); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	c.play(r)
	c.advance(time.Hour).complete("short")
	if got := summary(c.plan(opts).Decisions); len(got) != 0 {
		t.Fatalf("at +1h: %v, want nothing (head waits for r1)", got)
	}
	c.advance(time.Hour).complete("r1")
	r = c.plan(opts)
	if diff := cmp.Diff([]string{"dispatch head n1[0-7]"}, summary(r.Decisions)); diff != "" {
		t.Fatalf("at +2h (-want +got):\n%s", diff)
	}
	if !c.now.Equal(reservedAt) {
		t.Errorf("head started at %s, reserved at %s", c.now, reservedAt)
	}
}

// A later task that preempts must not plan on GPUs reserved for the head:
// n1 has r (4 GPUs, 2 h, not preemptible), low (2 GPUs, 10 h, preemptible)
// and 2 free GPUs. The head (HIGH, 8) cannot preempt enough and is
// reserved n1 from +10 h. A later HIGH of 4 GPUs, 20 h, finds room only by
// counting the 2 free GPUs reserved for the head: it should not preempt.
// Played forward, the preemption would be wasted: once low exits, the head
// is first in line and takes low's GPUs at +2 h, h2 keeps waiting, and low
// has lost its work for nothing.
func TestPreemptorKeepsOffReservation(t *testing.T) {
	c := cluster(t).nodes(1, 8).
		running(task{id: "r", pred: 2 * time.Hour, noPreempt: true}, on("n1", 0, 1, 2, 3)).
		running(task{id: "low", class: domain.Low, pred: 10 * time.Hour}, on("n1", 4, 5)).
		submit(
			task{id: "head", class: domain.High, gpus: 8, pred: time.Hour},
			task{id: "h2", class: domain.High, gpus: 4, pred: 20 * time.Hour},
		)
	opts := policy.Options{Preemption: policy.Ladder, Explain: true}
	r := c.plan(opts)
	reserved := r.Waiting["head"].ReservedAt
	if want := c.now.Add(10 * time.Hour); !reserved.Equal(want) {
		t.Fatalf("head reserved at %s, want %s", reserved.Sub(t0), want.Sub(t0))
	}
	if diff := cmp.Diff([]string{}, summary(r.Decisions)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
