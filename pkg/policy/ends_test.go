package policy_test

import (
	"fmt"
	"sort"
	"strings"
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
// yields, at every step of a pass and once the pass has placed and
// preempted, the ends of every holder sorted (Policy.PlanChecked), over
// random states played forward. Walks past the kept ends are exercised by
// TestPropEndIndexSameWalk, whose clusters have up to 96 holders.
func TestPropEndWalkSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		c.playChecked(t, o, policy.New(o), 4, "the end walk", nil)
	})
}

// The reservation walk that reads the fold's end index (without
// Input.Predict: the user's estimates) decides and explains the same, byte
// for byte, as the walk that predicts every holder (Input.Predict giving
// the user's estimate: the same predictions, and no reading of the index),
// and its walks are the reference's at every step (Policy.PlanChecked),
// over random states played forward: tasks past their estimate, ties, tasks dispatched and not
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
			every := in
			every.Predict = (*domain.Task).EstimatedRun
			want := p.Plan(every)
			r, bad := p.PlanChecked(in)
			if len(bad) > 0 {
				t.Fatalf("step %d: the pass differs from its references:\n%s\nworld:\n%s", step, strings.Join(bad, "\n"), dump(c.st, o, c.now))
			}
			for _, r := range []policy.Result{r, p.Plan(in)} {
				if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d: the end index changes the pass (-every holder +index):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
				}
			}
			playSomeUnstarted(t, c, want)
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

// The walk from the fold's end index, and the walk that predicts every
// holder and keeps the earliest sorted (Input.Predict giving the user's
// estimate; with more holders than it keeps, it heapifies the rest), yield
// every holder's end in the same order, with the same remaining times, as
// the reference's sort of every holder's end, on random busy clusters: many holders, started at random times
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
			want := p.RefWalkEnds(in)
			every := in
			every.Predict = (*domain.Task).EstimatedRun
			for name, in := range map[string]policy.Input{"index": in, "every-holder": every} {
				if diff := cmp.Diff(want, p.WalkEnds(in)); diff != "" {
					t.Fatalf("step %d: the %s walk differs (-reference +%s):\n%s", step, name, name, diff)
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

// playSomeUnstarted plays a pass's decisions as the scheduler would, but
// leaves some dispatches not started yet.
func playSomeUnstarted(t *rapid.T, c *harness, r policy.Result) {
	for _, d := range r.Decisions {
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
}

// endOrderOf is the Input.Ends a forward simulation would keep for in:
// every started holder at StartedAt + its predicted run.
func endOrderOf(in policy.Input) *policy.EndOrder {
	o := policy.NewEndOrder(0)
	for _, t := range in.State.Active() {
		if !t.StartedAt.IsZero() {
			o.Started(t, in.Predict)
		}
	}
	return o
}

// The reservation walk that reads a caller's order of ends
// (Input.Ends) decides and explains the same, byte for byte, as the walk
// that predicts every holder, and its walks are the reference's at every
// step (Policy.PlanChecked), over random states played forward (ties,
// tasks past their prediction, tasks dispatched and not started).
func TestPropEndOrderSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		c.submitMore(t, 40)
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 5; step++ {
			want := p.Plan(c.input())
			in := c.input()
			in.Ends = endOrderOf(in)
			r, bad := p.PlanChecked(in)
			if len(bad) > 0 {
				t.Fatalf("step %d: the pass differs from its references:\n%s\nworld:\n%s", step, strings.Join(bad, "\n"), dump(c.st, o, c.now))
			}
			for _, r := range []policy.Result{r, p.Plan(in)} {
				if diff := cmp.Diff(want, r, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("step %d: the order of ends changes the pass (-every holder +order):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
				}
			}
			playSomeUnstarted(t, c, want)
			if rapid.Bool().Draw(t, "same-time") {
				continue
			}
			c.playOn(t)
		}
	})
}

// EndOrder keeps its tasks by end, then SubmitSeq, through sets, moves
// and removals.
func TestEndOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tk := func(seq uint64) *domain.Task { return &domain.Task{ID: fmt.Sprint("t", seq), SubmitSeq: seq} }
	a, b, c, d := tk(1), tk(2), tk(3), tk(4)
	cases := []struct {
		name string
		do   func(o *policy.EndOrder)
		want []string
	}{
		{"by end", func(o *policy.EndOrder) { o.Set(c, t0.Add(3)); o.Set(a, t0.Add(1)); o.Set(b, t0.Add(2)) }, []string{"t1", "t2", "t3"}},
		{"ties by submit order", func(o *policy.EndOrder) { o.Set(d, t0); o.Set(b, t0); o.Set(c, t0) }, []string{"t2", "t3", "t4"}},
		{"a move", func(o *policy.EndOrder) { o.Set(a, t0); o.Set(b, t0.Add(1)); o.Set(a, t0.Add(2)) }, []string{"t2", "t1"}},
		{"removals, among ties and of the absent", func(o *policy.EndOrder) {
			o.Set(a, t0)
			o.Set(b, t0)
			o.Set(c, t0)
			o.Remove(b)
			o.Remove(d)
		}, []string{"t1", "t3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := policy.NewEndOrder(0)
			tc.do(o)
			if diff := cmp.Diff(tc.want, policy.EndOrderIDs(o)); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

// EndOrder read between random sets, moves and removals (each merged in
// only when read) lists its tasks as sorting every task's end then would:
// by end, then SubmitSeq.
func TestPropEndOrderMerges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t0 := time.Unix(1000, 0)
		var tasks []*domain.Task
		for i := 0; i < rapid.IntRange(1, 12).Draw(t, "tasks"); i++ {
			tasks = append(tasks, &domain.Task{ID: fmt.Sprint("t", i), SubmitSeq: uint64(100 - i)})
		}
		o := policy.NewEndOrder(0)
		ends := map[*domain.Task]time.Time{}
		for step := 0; step < 60; step++ {
			tk := rapid.SampledFrom(tasks).Draw(t, "task")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				end := t0.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "end")) * time.Second)
				o.Set(tk, end)
				ends[tk] = end
			case 2:
				o.Remove(tk)
				delete(ends, tk)
			case 3:
				var want []*domain.Task
				for k := range ends {
					want = append(want, k)
				}
				sort.Slice(want, func(i, j int) bool {
					a, b := want[i], want[j]
					if !ends[a].Equal(ends[b]) {
						return ends[a].Before(ends[b])
					}
					return a.SubmitSeq < b.SubmitSeq
				})
				var ids []string
				for _, k := range want {
					ids = append(ids, k.ID)
				}
				if diff := cmp.Diff(ids, policy.EndOrderIDs(o)); diff != "" {
					t.Fatalf("step %d: order (-sorted +EndOrder):\n%s", step, diff)
				}
			}
		}
	})
}
