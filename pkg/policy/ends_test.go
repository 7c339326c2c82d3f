package policy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// The reservation walk that keeps the earliest ends sorted while it
// predicts every holder (and heapifies the rest only when it needs more)
// decides and explains the same, byte for byte, as the walk of every
// holder's ending from a heap — with the default number kept and with 1–3
// kept, so that walks past the kept ones are exercised — over random
// states played forward.
func TestPropEndWalkSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		top := rapid.IntRange(1, 3).Draw(t, "top")
		for step := 0; step < 4; step++ {
			want := p.SlowEnds(true, 0).Plan(c.input())
			for _, q := range []*policy.Policy{p, p.SlowEnds(false, top)} {
				r := q.Plan(c.input())
				if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d (top %d): the end walk changes the pass (-slow +fast):\n%s\nworld:\n%s", step, top, diff, dump(c.st, o, c.now))
				}
			}
			c.play(want)
			c.playOn(t)
		}
	})
}

// The reservation walk that reads the fold's end index (without
// Input.Predict: the user's estimates) decides and explains the same, byte
// for byte, as the walks that predict every holder, over random states
// played forward: tasks past their estimate, ties, tasks dispatched and not
// started, and passes whose now is before the last event's time (the walk
// then predicts every holder).
func TestPropEndIndexSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 5; step++ {
			in := c.input()
			in.Predict = nil
			if rapid.IntRange(0, 5).Draw(t, "skew") == 0 {
				in.Now = in.Now.Add(-time.Duration(rapid.IntRange(1, 90).Draw(t, "back")) * time.Second)
			}
			want := p.WithoutEndIndex().Plan(in)
			for _, q := range []*policy.Policy{p, p.SlowEnds(true, 0)} {
				r := q.Plan(in)
				if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d: the end index changes the pass (-every holder +index):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
				}
			}
			// Play the pass; some dispatches are not started yet.
			for _, d := range want.Decisions {
				switch d.Kind {
				case policy.Dispatch:
					c.emit(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, BasedOnSeq: c.seq, Reason: d.Reason, Backfill: d.Backfill})
					if rapid.IntRange(0, 3).Draw(t, "unstarted") > 0 {
						c.emit(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 100})
					}
				case policy.Preempt:
					c.emit(events.PreemptRequested{TaskID: d.TaskID, For: d.For, Policy: "test", Reason: d.Reason, BasedOnSeq: c.seq})
				}
			}
			if rapid.Bool().Draw(t, "same-time") {
				continue // plan again at the time of the last events
			}
			c.playOn(t)
			for _, tk := range c.st.InState(domain.Dispatched) {
				if rapid.Bool().Draw(t, "start") {
					c.emit(events.Started{TaskID: tk.ID, Node: tk.Placements[0].Node, PID: 100})
				}
			}
			if m := c.st.IndexMismatch(); m != "" {
				t.Fatalf("step %d: %s", step, m)
			}
		}
	})
}

// The walk from the fold's end index yields every holder's end in the same
// order, with the same remaining times, as the walks that predict every
// holder, on random busy clusters: many holders, started at random times
// with random estimates (many past them, many ending at the same time),
// some not started, some yielding, over passes as time moves on.
func TestPropEndIndexSameWalk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := cluster(t)
		nodes := rapid.IntRange(1, 12).Draw(t, "nodes")
		var holders []string
		for n := 0; n < nodes; n++ {
			name := fmt.Sprintf("n%02d", n)
			c.node(name, 8, "H100", 81920)
			for g := 0; g < 8; {
				k := min(rapid.IntRange(1, 8).Draw(t, "k"), 8-g)
				id := fmt.Sprintf("r%02d-%d", n, g)
				c.advance(time.Duration(rapid.IntRange(0, 30).Draw(t, "gap")) * time.Second * 30)
				c.submit(task{id: id, gpus: k, hours: float64(rapid.IntRange(0, 40).Draw(t, "quarters")) / 4})
				c.emit(dispatchOnly(id, on(name, span(g, g+k)...)))
				if rapid.IntRange(0, 5).Draw(t, "unstarted") > 0 {
					c.emit(events.Started{TaskID: id, Node: name, PID: 100})
				}
				holders = append(holders, id)
				g += k
			}
		}
		p := policy.New(policy.Options{})
		for step := 0; step < 6; step++ {
			in := c.input()
			in.Predict = nil
			if rapid.IntRange(0, 5).Draw(t, "skew") == 0 {
				in.Now = in.Now.Add(-time.Duration(rapid.IntRange(1, 90).Draw(t, "back")) * time.Second)
			} else if !p.UsesEndIndex(in) {
				t.Fatalf("step %d: the pass does not read the end index", step)
			}
			want := p.WithoutEndIndex().WalkEnds(in)
			for name, q := range map[string]*policy.Policy{"index": p, "slow": p.SlowEnds(true, 0)} {
				if diff := cmp.Diff(want, q.WalkEnds(in)); diff != "" {
					t.Fatalf("step %d: the %s walk differs (-every holder +%s):\n%s", step, name, name, diff)
				}
			}
			c.advance(time.Duration(rapid.IntRange(0, 240).Draw(t, "dt")) * time.Minute)
			for _, id := range holders {
				tk := c.st.Tasks[id]
				if !tk.HoldsGPUs() {
					continue
				}
				switch rapid.IntRange(0, 9).Draw(t, "fate") {
				case 0:
					c.complete(id)
				case 1:
					if tk.State == domain.Dispatched {
						c.emit(events.Started{TaskID: id, Node: tk.Node, PID: 100})
					}
				case 2:
					if tk.State == domain.Running {
						c.preempting(id, "gone")
					}
				}
			}
			if m := c.st.IndexMismatch(); m != "" {
				t.Fatalf("step %d: %s", step, m)
			}
		}
	})
}
