package policy_test

import (
	"time"

	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// settle applies each pass's decisions at the same instant, as the trace
// simulator does — a dispatch starts at once, a preempted task
// checkpoints, yields and is requeued at once — and plans again until a
// pass decides nothing. It returns the passes that decided something.
func settle(t tb, c *harness, p *policy.Policy, bound int) (passes int, log []string) {
	t.Helper()
	for passes = 0; ; passes++ {
		r := p.Plan(c.input())
		if len(r.Decisions) == 0 {
			return passes, log
		}
		log = append(log, fmt.Sprintf("pass %d: %v", passes+1, summary(r.Decisions)))
		if passes == bound {
			t.Fatalf("no fixed point after %d passes at one instant:\n%s", bound, join(log))
		}
		c.play(r)
		for _, d := range r.Decisions {
			if d.Kind == policy.Preempt {
				c.checkpoint(d.TaskID).exit(d.TaskID)
			}
		}
	}
}

// fixBound is the most passes at one instant that may decide something.
// Each pass's preemptions let their preemptors start in the next; a start
// can let a reclaim or a ladder preemption through in the one after; 60,000
// random states needed at most 5. A cycle never ends.
const fixBound = 8

const hour = time.Hour

// Passes at one instant reach a fixed point: what a pass decides is not
// undone by the next (a preempted task is not placed back ahead of its
// preemptor, a reclaim does not bounce), so the scheduler and the
// simulator stop deciding within a few passes.
func TestPropFixedPoint(t *testing.T) {
	most := 0
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		o := genOptions(t)
		if rapid.Bool().Draw(t, "yielders-exit") {
			// As in the simulator, tasks already asked to yield are gone.
			for _, tk := range c.st.InState(domain.Preempting) {
				if tk.HoldsGPUs() {
					c.exit(tk.ID)
				} else {
					c.emit(events.Requeued{TaskID: tk.ID, Reason: "preempted"})
				}
			}
		}
		t.Logf("world:\n%s", dump(c.st, o, c.now))
		n, _ := settle(t, c, policy.New(o), fixBound)
		most = max(most, n)
	})
	t.Logf("at most %d passes decided something before a fixed point", most)
}

// Played at one instant, a case table of known bouncing states settles.
func TestFixedPoint(t *testing.T) {
	cases := map[string]struct {
		setup func(c *harness)
		opts  policy.Options
	}{
		"ladder under class aging: a younger MEDIUM does not preempt the LOW task aged ahead of it": {
			// Found by TestPropFixedPoint: the LOW task, ahead in the queue's
			// order, started; the MEDIUM preempted it by class; requeued,
			// it was ahead again and took the GPUs back, for ever.
			setup: func(c *harness) {
				c.nodes(1, 4).
					submit(task{id: "low-old", class: domain.Low, gpus: 4, at: t0.Add(-3 * hour)}).
					submit(task{id: "med", class: domain.Medium})
			},
			opts: policy.Options{Preemption: policy.Ladder, ClassAging: hour},
		},
		"ladder does not take a team below its guarantee": {
			setup: func(c *harness) {
				c.nodes(1, 2).
					running(task{id: "b1", team: "b", class: domain.Low}, on("n1", 0)).
					running(task{id: "b2", team: "b", class: domain.Low}, on("n1", 1)).
					submit(task{id: "a-med", team: "a", class: domain.Medium})
			},
			opts: policy.Options{Preemption: policy.Ladder, Teams: policy.Teams{"b": {GPUs: 2}}},
		},
		"a reclaim's victim does not backfill back onto the reclaimed GPU": {
			// The trace simulator's livelock: the head (vision, 6 GPUs) is
			// reserved at +2 h on n1 and n2[0 3]; speech, under its
			// guarantee, used to reclaim nlp-short's GPU and plan on the
			// free n2[3] reserved for the head; requeued, nlp-short (30 min)
			// backfilled back before the reservation, and so on.
			setup: func(c *harness) {
				c.nodes(2, 4).
					running(task{id: "fixed", team: "x", pred: 2 * hour, noPreempt: true}, on("n1", 0, 1, 2, 3)).
					running(task{id: "nlp-short", team: "nlp", class: domain.High, pred: hour / 2}, on("n2", 0)).
					running(task{id: "nlp-long", team: "nlp", pred: 5 * hour, noPreempt: true}, on("n2", 1, 2)).
					submit(task{id: "head", team: "vision", gpus: 6, pred: hour},
						task{id: "speech", team: "speech", gpus: 2, pred: 4 * hour})
			},
			opts: policy.Options{Teams: policy.Teams{"vision": {GPUs: 6}, "speech": {GPUs: 2}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := cluster(t)
			tc.setup(c)
			settle(t, c, policy.New(tc.opts), fixBound)
		})
	}
}
