package policy_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// sim plays passes forward on a virtual clock: decisions are applied as
// events, every dispatched task runs exactly its true run time (which is
// also what Input.Predict says), and the clock jumps to the next end.
type sim struct {
	c        *harness
	runtime  map[string]time.Duration
	ends     map[string]time.Time
	arrivals []arrival // in time order
}

type arrival struct {
	at      time.Time
	t       task
	runtime time.Duration
}

func newSim(c *harness) *sim {
	return &sim{c: c, runtime: map[string]time.Duration{}, ends: map[string]time.Time{}}
}

// run starts a task now on the placements, to end after runtime.
func (s *sim) run(tk task, runtime time.Duration, ps ...events.Placement) {
	tk.pred = runtime
	s.runtime[tk.id] = runtime
	s.c.running(tk, ps...)
	s.ends[tk.id] = s.c.now.Add(runtime)
}

// arrive schedules a submission; arrivals must be added in time order.
func (s *sim) arrive(at time.Time, tk task, runtime time.Duration) {
	s.arrivals = append(s.arrivals, arrival{at, tk, runtime})
}

func (s *sim) submit(tk task, runtime time.Duration) {
	tk.pred = runtime
	s.runtime[tk.id] = runtime
	s.c.submit(tk)
}

// apply plays a pass's decisions and notes the ends of dispatched tasks.
func (s *sim) apply(r policy.Result) {
	s.c.play(r)
	for _, id := range dispatched(r) {
		s.ends[id] = s.c.now.Add(s.runtime[id])
	}
}

// next advances the clock to the next end and completes what ends then;
// false when nothing runs.
func (s *sim) next() bool {
	var at time.Time
	for _, e := range s.ends {
		if at.IsZero() || e.Before(at) {
			at = e
		}
	}
	if len(s.arrivals) > 0 && (at.IsZero() || s.arrivals[0].at.Before(at)) {
		at = s.arrivals[0].at
	}
	if at.IsZero() {
		return false
	}
	s.c.now = at
	for _, tk := range s.c.st.Active() {
		if e, ok := s.ends[tk.ID]; ok && e.Equal(at) {
			s.c.complete(tk.ID)
			delete(s.ends, tk.ID)
		}
	}
	for len(s.arrivals) > 0 && s.arrivals[0].at.Equal(at) {
		a := s.arrivals[0]
		s.arrivals = s.arrivals[1:]
		s.submit(a.t, a.runtime)
	}
	return true
}

// (h) EASY backfill never delays the task holding the reservation when
// predictions hold: a task given a reservation starts no later than the
// earliest reservation it was ever given; and everything that can run
// eventually runs. Tasks already running when the play begins have run for
// a while; LOW tasks arrive later (behind everything queued, so they may
// only backfill).
func TestPropBackfillKeepsReservations(t *testing.T) {
	cases, backfilled := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		cases++
		didBackfill := false
		c := cluster(t)
		genNodes(t, c, 4, rapid.Bool().Draw(t, "some-unhealthy"))
		total, _ := c.st.TotalGPUs()
		if total == 0 {
			t.Skip("no healthy GPU")
		}
		s := newSim(c)
		quarters := func(label string) time.Duration {
			return time.Duration(rapid.IntRange(1, 40).Draw(t, label)) * 15 * time.Minute
		}
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "running"); i < n; i++ {
			node := rapid.SampledFrom(c.st.NodeNames()).Draw(t, "node")
			free := c.st.FreeGPUs(c.st.Nodes[node])
			if len(free) == 0 {
				continue
			}
			k := rapid.IntRange(1, len(free)).Draw(t, "k")
			s.run(task{id: fmt.Sprintf("r%d", i), noPreempt: true}, quarters("r-quarters"),
				events.Placement{Node: node, GPUs: gpuIDs(free[:k])})
		}
		// Less than any run time: no task is past its prediction.
		c.advance(time.Duration(rapid.IntRange(0, 14).Draw(t, "elapsed")) * time.Minute)
		at := c.now
		for i, n := 0, rapid.IntRange(0, 6).Draw(t, "arrivals"); i < n; i++ {
			at = at.Add(time.Duration(rapid.IntRange(1, 600).Draw(t, "arrival-gap")) * time.Minute)
			s.arrive(at, task{id: fmt.Sprintf("late%d", i), class: domain.Low, noPreempt: true,
				gpus: rapid.IntRange(1, total).Draw(t, "gpus")}, quarters("quarters"))
		}
		for i, n := 0, rapid.IntRange(1, 14).Draw(t, "tasks"); i < n; i++ {
			s.submit(task{
				id:        fmt.Sprintf("t%d", i),
				class:     rapid.SampledFrom(classes).Draw(t, "class"),
				gpus:      rapid.IntRange(1, total).Draw(t, "gpus"),
				noPreempt: true,
				model:     rapid.SampledFrom([]string{"", "", "", "A100", "H100"}).Draw(t, "model"),
			}, quarters("quarters"))
		}
		opts := policy.Options{Explain: true}
		promised := map[string]time.Time{} // earliest reservation per task
		var log []string
		for step := 0; ; step++ {
			if step > 100 {
				t.Fatalf("no end after 100 passes")
			}
			r := c.plan(opts)
			log = append(log, fmt.Sprintf("%s: %v", c.now.Sub(t0), summary(r.Decisions)))
			for id, w := range r.Waiting {
				if w.ReservedAt.IsZero() {
					continue
				}
				log[len(log)-1] += fmt.Sprintf(" %s reserved at %s", id, w.ReservedAt.Sub(t0))
				if p, ok := promised[id]; !ok || w.ReservedAt.Before(p) {
					promised[id] = w.ReservedAt
				}
			}
			for _, q := range c.st.Queued() {
				if p, ok := promised[q.ID]; ok && c.now.After(p) {
					t.Fatalf("%s was reserved at %s and still waits at %s:\n%s", q.ID, p.Sub(t0), c.now.Sub(t0), join(log))
				}
			}
			for _, d := range r.Decisions {
				didBackfill = didBackfill || d.Backfill
			}
			s.apply(r)
			if !s.next() {
				break
			}
		}
		// Liveness: what is left cannot run here at all.
		r := c.plan(opts)
		for _, q := range c.st.Queued() {
			if w := r.Waiting[q.ID]; w.Reason != policy.ReasonUnsatisfiable && w.Reason != policy.ReasonNodesUnhealthy {
				t.Fatalf("%s waits on an idle cluster: %+v\n%s", q.ID, w, join(log))
			}
		}
		if didBackfill {
			backfilled++
		}
	})
	t.Logf("%d of %d cases backfilled", backfilled, cases)
}

func join(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}

// (i) A team under its guarantee with waiting work is not kept below it by
// borrowers that could be preempted: played forward (preemptions applied,
// victims exit and requeue), within a few passes the team holds at least
// min(guarantee, its demand, what free GPUs and preemptible borrowers
// beyond their own guarantees can give). Tasks take one GPU each, so the
// bound is exact; the team's own tasks are not preemptible.
func TestPropGuaranteeReached(t *testing.T) {
	known := bugs{}
	cases, reclaimed := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		cases++
		c := cluster(t)
		nodes := genNodes(t, c, 4, false)
		total, _ := c.st.TotalGPUs()
		gA := rapid.IntRange(1, total).Draw(t, "guarantee-a")
		teams := policy.Teams{"a": {GPUs: gA}}
		gB := rapid.IntRange(0, total-gA).Draw(t, "guarantee-b")
		if gB > 0 {
			teams["b"] = policy.Guarantee{GPUs: gB}
		}
		opts := policy.Options{
			Teams:       teams,
			Preemption:  rapid.SampledFrom([]string{policy.CriticalOnly, policy.Ladder}).Draw(t, "preemption"),
			WithinClass: rapid.SampledFrom([]string{policy.FIFO, policy.ShortestPredicted}).Draw(t, "within"),
			NoBackfill:  rapid.Bool().Draw(t, "nobackfill"),
		}
		nonCritical := classes[:3]

		// 1. Running: one-GPU tasks of a (not preemptible) and b (mostly
		//    preemptible), with some GPUs left free.
		usageA, freeA, preemptibleB, usageB := 0, 0, 0, 0
		k := 0
		for _, node := range nodes {
			for _, g := range c.st.FreeGPUs(c.st.Nodes[node]) {
				k++
				switch rapid.IntRange(0, 9).Draw(t, "holder") {
				case 0:
					freeA++
				case 1:
					c.running(task{id: fmt.Sprintf("a-run%d", k), team: "a", class: rapid.SampledFrom(nonCritical).Draw(t, "class"), noPreempt: true}, on(node, g.Index))
					usageA++
				default:
					fixed := rapid.IntRange(0, 4).Draw(t, "b-fixed") == 0
					c.running(task{id: fmt.Sprintf("b-run%d", k), team: "b", class: rapid.SampledFrom(nonCritical).Draw(t, "class"), noPreempt: fixed}, on(node, g.Index))
					usageB++
					if !fixed {
						preemptibleB++
					}
				}
			}
		}
		// 2. Queued: a's one-GPU tasks, and some of b's.
		demandA := usageA
		for i, n := 0, rapid.IntRange(0, total+2).Draw(t, "a-queued"); i < n; i++ {
			c.submit(task{id: fmt.Sprintf("a-q%d", i), team: "a", class: rapid.SampledFrom(nonCritical).Draw(t, "class"), noPreempt: true})
			demandA++
		}
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "b-queued"); i < n; i++ {
			c.submit(task{id: fmt.Sprintf("b-q%d", i), team: "b", class: rapid.SampledFrom(nonCritical).Draw(t, "class")})
		}
		want := min(gA, demandA, usageA+freeA+min(preemptibleB, max(0, usageB-gB)))

		t.Logf("world:\n%s", dump(c.st, opts, c.now))

		// 3. Play: a pass, its decisions applied, the yielding tasks exit.
		var log []string
		for step := 0; step < 6; step++ {
			r := c.plan(opts)
			log = append(log, fmt.Sprintf("pass %d: %v usage %v", step+1, summary(r.Decisions), c.usage()))
			if step == 0 && len(preempts(r)) > 0 {
				reclaimed++
			}
			c.play(r)
			c.exitAll()
		}
		if got := c.usage()["a"]; got < want {
			t.Fatalf("team a holds %d, want at least %d = min(guarantee %d, demand %d, held %d + free %d + borrowable min(%d preemptible, %d over b's guarantee %d))\n%s",
				got, want, gA, demandA, usageA, freeA, preemptibleB, usageB-gB, gB, join(log))
		}
		// b holds its guarantee, unless a CRITICAL task took it (none here).
		if u := c.usage()["b"]; u < min(gB, usageB) {
			t.Fatalf("team b fell to %d under its guarantee %d\n%s", u, gB, join(log))
		}
	})
	known.report(t)
	t.Logf("%d of %d cases preempted in the first pass", reclaimed, cases)
}
