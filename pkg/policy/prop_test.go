package policy_test

import (
	"flag"
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

// Property tests of one pass over random states, and of passes played
// forward. Every state is built by folding events, as in the table tests.
//
// Violations that match a known policy bug (each reproduced by a skipped
// table test) may be counted with bugs.hit and logged instead of failing,
// so the suite stays green until the fix; -policy.strict=all (or =<bug>)
// makes them fail, which lets rapid shrink them. No bug is known now.

var strict = flag.String("policy.strict", "", `property tests fail on known policy bugs too: "all" or one bug's name`)

var classes = []domain.Priority{domain.Low, domain.Medium, domain.High, domain.Critical}

// bugs counts property violations matching known bugs, by bug.
type bugs map[string]int

func (b bugs) hit(t *rapid.T, bug, format string, args ...any) {
	t.Helper()
	if *strict == "all" || *strict == bug {
		t.Fatalf("BUG "+bug+": "+format, args...)
	}
	b[bug]++
}

func (b bugs) report(t *testing.T) {
	names := make([]string, 0, len(b))
	for n := range b {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("known bug %q matched %d random cases (-policy.strict=%s shrinks one)", n, b[n], n)
	}
}

// genNodes adds 1–max nodes of 1–8 GPUs, A100 or H100, 40 or 80 GiB;
// with unhealthy, about one GPU in eight is unhealthy from the start.
func genNodes(t *rapid.T, c *harness, max int, unhealthy bool) []string {
	n := rapid.IntRange(1, max).Draw(t, "nodes")
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i+1)
		gpus := rapid.IntRange(1, 8).Draw(t, "gpus")
		model := rapid.SampledFrom([]string{"A100", "H100"}).Draw(t, "model")
		mem := rapid.SampledFrom([]int{40960, 81920}).Draw(t, "mem")
		var bad []int
		for g := 0; unhealthy && g < gpus; g++ {
			if rapid.IntRange(0, 7).Draw(t, "bad") == 0 {
				bad = append(bad, g)
			}
		}
		c.node(names[i], gpus, model, mem, bad...)
	}
	return names
}

// genTask draws a queued task's fields.
func genTask(t *rapid.T, c *harness, id string) task {
	tk := task{
		id:        id,
		class:     rapid.SampledFrom(classes).Draw(t, "class"),
		gpus:      rapid.IntRange(1, 16).Draw(t, "gpus"),
		team:      rapid.SampledFrom([]string{"a", "b", "c", "x"}).Draw(t, "team"),
		hours:     float64(rapid.IntRange(1, 100).Draw(t, "tenths")) / 10,
		noPreempt: rapid.IntRange(0, 2).Draw(t, "fixed") == 0,
		model:     rapid.SampledFrom([]string{"", "", "", "A100", "h100"}).Draw(t, "model"),
		mem:       rapid.SampledFrom([]int{0, 0, 0, 40960, 81920, 99999}).Draw(t, "mem"),
		at:        c.now.Add(-time.Duration(rapid.IntRange(0, 100*60).Draw(t, "waited")) * time.Minute),
	}
	if m := rapid.IntRange(0, 600).Draw(t, "pred"); m > 0 {
		tk.pred = time.Duration(m) * time.Minute
	}
	return tk
}

// submitMore submits 0–max more random queued tasks, m0, m1, …
func (c *harness) submitMore(t *rapid.T, max int) {
	for i, n := 0, rapid.IntRange(0, max).Draw(t, "more"); i < n; i++ {
		c.submit(genTask(t, c, fmt.Sprintf("m%d", i)))
	}
}

func genOptions(t *rapid.T) policy.Options {
	o := policy.Options{
		Preemption:  rapid.SampledFrom([]string{"", policy.CriticalOnly, policy.Ladder}).Draw(t, "preemption"),
		WithinClass: rapid.SampledFrom([]string{"", policy.FIFO, policy.ShortestPredicted}).Draw(t, "within"),
		NoBackfill:  rapid.IntRange(0, 3).Draw(t, "nobackfill") == 0,
		Explain:     rapid.Bool().Draw(t, "explain"),
	}
	if rapid.Bool().Draw(t, "aging") {
		o.AgingTau = time.Duration(rapid.IntRange(1, 600).Draw(t, "tau")) * time.Minute
		o.MaxWait = time.Duration(rapid.IntRange(1, 96).Draw(t, "maxwait")) * time.Hour
	}
	if rapid.Bool().Draw(t, "class-aging") {
		o.ClassAging = time.Duration(rapid.IntRange(10, 600).Draw(t, "class-aging-min")) * time.Minute
	}
	if rapid.Bool().Draw(t, "starvation") {
		o.StarvationWait = time.Duration(rapid.IntRange(10, 600).Draw(t, "starvation-min")) * time.Minute
	}
	if rapid.Bool().Draw(t, "patience") {
		o.PreemptPatience = time.Duration(rapid.IntRange(1, 120).Draw(t, "patience-min")) * time.Minute
	}
	o.Victims = rapid.SampledFrom([]string{"", policy.LeastLost, policy.Newest}).Draw(t, "victims")
	if rapid.Bool().Draw(t, "teams") {
		o.Teams = policy.Teams{}
		share := 0.0
		for _, team := range []string{"a", "b", "c"} {
			switch rapid.IntRange(0, 2).Draw(t, "guarantee") {
			case 1:
				o.Teams[team] = policy.Guarantee{GPUs: rapid.IntRange(1, 16).Draw(t, "g")}
			case 2:
				s := rapid.SampledFrom([]float64{0.1, 0.25, 0.5}).Draw(t, "share")
				if share+s <= 1 {
					share += s
					o.Teams[team] = policy.Guarantee{Share: s}
				}
			}
		}
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("generated options invalid: %v", err)
	}
	return o
}

// playChecked plans steps passes in a row on c's world with p, each pass
// with its fast components compared with their references before every
// step (Policy.PlanChecked: the memo, the end walk, the arena's
// reservation, the victim pool), and fails on any difference (what names
// the optimisation the test is about), or when the checked pass decides or
// explains otherwise than Plan; it plays each pass on (playOn) and hands it
// to seen, when not nil.
func (c *harness) playChecked(t *rapid.T, o policy.Options, p *policy.Policy, steps int, what string, seen func(policy.Result)) {
	for step := 0; step < steps; step++ {
		r := p.Plan(c.input())
		checked, bad := p.PlanChecked(c.input())
		if len(bad) > 0 {
			t.Fatalf("step %d (%s): the pass differs from its references:\n%s\nworld:\n%s", step, what, strings.Join(bad, "\n"), dump(c.st, o, c.now))
		}
		if diff := cmp.Diff(checked, r, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("step %d: checking the pass changes it (-checked +plan):\n%s\nworld:\n%s", step, diff, dump(c.st, o, c.now))
		}
		if seen != nil {
			seen(r)
		}
		c.play(r)
		c.playOn(t)
	}
}

// genWorld builds a random cluster, running set and queue, by events.
// playOn moves a random world on after a pass was played: a random time
// passes, the yielding tasks exit, and some running tasks complete.
func (c *harness) playOn(t *rapid.T) {
	c.advance(time.Duration(rapid.IntRange(1, 120).Draw(t, "dt")) * time.Minute)
	c.exitAll()
	for _, tk := range c.st.Active() {
		if rapid.IntRange(0, 3).Draw(t, "ends") == 0 && !tk.Holding {
			c.complete(tk.ID)
		}
	}
}

func genWorld(t *rapid.T) *harness {
	c := cluster(t)
	nodes := genNodes(t, c, 6, true)

	// 1. Running tasks on free healthy GPUs, sometimes a gang.
	var running []string
	for i, n := 0, rapid.IntRange(0, 10).Draw(t, "running"); i < n; i++ {
		c.advance(time.Duration(rapid.IntRange(0, 120).Draw(t, "gap")) * time.Minute)
		node := rapid.SampledFrom(nodes).Draw(t, "node")
		free := c.st.FreeGPUs(c.st.Nodes[node])
		if len(free) == 0 {
			continue
		}
		k := rapid.IntRange(1, len(free)).Draw(t, "k")
		ps := []events.Placement{{Node: node, GPUs: gpuIDs(free[:k])}}
		if other := rapid.SampledFrom(nodes).Draw(t, "gang-node"); other != node && rapid.Bool().Draw(t, "gang") {
			if f2 := c.st.FreeGPUs(c.st.Nodes[other]); len(f2) > 0 {
				ps = append(ps, events.Placement{Node: other, GPUs: gpuIDs(f2)})
			}
		}
		tk := genTask(t, c, fmt.Sprintf("r%d", i))
		tk.gpus, tk.model, tk.mem, tk.at = 0, "", 0, c.now
		c.running(tk, ps...)
		running = append(running, tk.id)
		if rapid.IntRange(0, 3).Draw(t, "ckpt") == 0 {
			c.advance(time.Duration(rapid.IntRange(0, 60).Draw(t, "to-ckpt")) * time.Minute).checkpoint(tk.id)
		}
	}

	// 2. The queue.
	var queued []string
	for i, n := 0, rapid.IntRange(0, 12).Draw(t, "queued"); i < n; i++ {
		tk := genTask(t, c, fmt.Sprintf("q%d", i))
		c.submit(tk)
		queued = append(queued, tk.id)
	}

	// 3. Some running tasks are yielding (to a queued task, or to one
	//    gone), some were preempted and requeued, some were cancelled but
	//    still hold their GPUs.
	for _, id := range running {
		switch rapid.IntRange(0, 9).Draw(t, "fate") {
		case 0, 1:
			forID := "gone"
			if len(queued) > 0 && rapid.Bool().Draw(t, "for-queued") {
				forID = rapid.SampledFrom(queued).Draw(t, "for")
			}
			c.preempting(id, forID)
		case 2:
			c.preempting(id, "gone").exit(id)
		case 3:
			c.emit(cancelled(id))
		}
	}

	// 4. Node events after placement: GPUs fail under running tasks,
	//    nodes drain or are lost.
	for _, node := range nodes {
		n := c.st.Nodes[node]
		switch rapid.IntRange(0, 11).Draw(t, "node-fate") {
		case 0, 1:
			c.unhealthy(node, rapid.IntRange(0, len(n.GPUs)-1).Draw(t, "xid"))
		case 2:
			c.drain(node)
		case 3:
			c.lose(node)
		}
	}
	c.advance(time.Duration(rapid.IntRange(0, 600).Draw(t, "now")) * time.Minute)
	return c
}

func gpuIDs(gs []domain.GPU) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.UUID
	}
	return out
}

// fits is a GPU's match with a task's constraints, as the issue states
// them: the model named (case-insensitively, within the full name) and at
// least the memory asked.
func fits(t *domain.Task, g domain.GPU) bool {
	if t.GPUModel != "" && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(t.GPUModel)) {
		return false
	}
	return g.MemoryMiB >= t.MinGPUMemMiB
}

// checkPass checks one pass's decisions against the state it saw.
func checkPass(t *rapid.T, st *domain.State, o policy.Options, r policy.Result, known bugs) {
	t.Helper()
	if o.Preemption == "" {
		o.Preemption = policy.CriticalOnly
	}
	used := map[string]string{}
	for g, owner := range st.Owner {
		used[g] = "held by " + owner
	}
	usage := map[string]int{}
	for _, tk := range st.Active() {
		usage[tk.Team] += len(tk.GPUUUIDs())
	}
	total, _ := st.TotalGPUs()
	guar := map[string]int{}
	for team, g := range o.Teams {
		if g.GPUs > 0 {
			guar[team] = g.GPUs
		} else {
			guar[team] = int(g.Share * float64(total))
		}
	}
	// cur is the GPUs per team as the pass goes: held, plus dispatched,
	// less preempted.
	cur := map[string]int{}
	for team, n := range usage {
		cur[team] = n
	}
	under := func(team string) bool { g, ok := guar[team]; return ok && cur[team] < g }

	seen := map[string]bool{}
	// promisedTo is, per team with a guarantee, what it holds, what the
	// pass dispatched to it, and the size of each of its tasks that
	// reclaimed in the pass: a further reclaim needs it under the guarantee.
	promisedTo := map[string]int{}
	for team := range guar {
		promisedTo[team] = usage[team]
	}
	reclaimers := map[string]bool{}
	for _, d := range r.Decisions {
		if seen[string(d.Kind)+":"+d.TaskID] {
			t.Fatalf("%s %s decided twice", d.Kind, d.TaskID)
		}
		seen[string(d.Kind)+":"+d.TaskID] = true
		tk := st.Tasks[d.TaskID]
		if tk == nil {
			t.Fatalf("%s of unknown task %s", d.Kind, d.TaskID)
		}
		switch d.Kind {
		case policy.Dispatch:
			if tk.State != domain.Queued {
				t.Fatalf("dispatch of %s in state %s", tk.ID, tk.State)
			}
			if o.NoBackfill && d.Backfill {
				t.Fatalf("backfill of %s under NoBackfill", tk.ID)
			}
			// (a), (e): free, healthy GPUs of schedulable nodes, each once,
			// fitting the constraints, exactly as many as asked.
			n := 0
			partial := 0
			for _, p := range d.Placements {
				node := st.Nodes[p.Node]
				if node == nil || !node.Schedulable() {
					t.Fatalf("dispatch of %s on node %s that is not schedulable", tk.ID, p.Node)
				}
				byID := map[string]domain.GPU{}
				healthy := 0
				for _, g := range node.GPUs {
					byID[g.UUID] = g
					if g.Healthy {
						healthy++
					}
				}
				for _, id := range p.GPUs {
					g, ok := byID[id]
					switch {
					case !ok:
						t.Fatalf("dispatch of %s on GPU %s not on node %s", tk.ID, id, p.Node)
					case !g.Healthy:
						t.Fatalf("dispatch of %s on unhealthy GPU %s", tk.ID, id)
					case used[id] != "":
						t.Fatalf("dispatch of %s on GPU %s already %s", tk.ID, id, used[id])
					case !fits(tk, g):
						t.Fatalf("dispatch of %s (model %q, ≥%d MiB) on %s %s (%d MiB)", tk.ID, tk.GPUModel, tk.MinGPUMemMiB, id, g.Model, g.MemoryMiB)
					}
					used[id] = "dispatched to " + tk.ID
					n++
				}
				if len(p.GPUs) != healthy {
					partial++
				}
			}
			if n != tk.GPUs {
				t.Fatalf("dispatch of %s on %d GPUs, asked %d", tk.ID, n, tk.GPUs)
			}
			// A gang is whole nodes plus at most one partial node.
			if len(d.Placements) > 1 && partial > 1 {
				t.Fatalf("gang of %s on %d partial nodes: %s", tk.ID, partial, placements(d.Placements))
			}
			cur[tk.Team] += tk.GPUs
			if _, ok := guar[tk.Team]; ok {
				promisedTo[tk.Team] += tk.GPUs
			}
		case policy.Preempt:
			forT := st.Tasks[d.For]
			switch {
			case tk.State != domain.Running:
				t.Fatalf("preempt of %s in state %s", tk.ID, tk.State)
			case tk.Priority == domain.Critical: // (b)
				t.Fatalf("CRITICAL %s preempted for %s", tk.ID, d.For)
			case !tk.Preemptible: // (c)
				t.Fatalf("non-preemptible %s preempted for %s", tk.ID, d.For)
			case forT == nil || forT.State != domain.Queued:
				t.Fatalf("preempt of %s for %q, not a queued task", tk.ID, d.For)
			case !strings.Contains(d.Reason, d.For):
				t.Fatalf("preempt of %s: reason %q does not name %s", tk.ID, d.Reason, d.For)
			}
			byClass := forT.Priority == domain.Critical ||
				(o.Preemption == policy.Ladder && tk.Priority < forT.Priority)
			if byClass {
				cur[tk.Team] -= len(tk.GPUUUIDs())
				break
			}
			// (d) Not allowed by class: it must be a team reclaim.
			if !under(forT.Team) || tk.Team == forT.Team {
				t.Fatalf("preempt of %s (%s, team %s) for %s (%s, team %s) under %s: neither class nor team guarantee allows it",
					tk.ID, tk.Priority, tk.Team, forT.ID, forT.Priority, forT.Team, o.Preemption)
			}
			if !strings.Contains(d.Reason, "team guarantee") {
				t.Fatalf("reclaim of %s for %s: reason %q", tk.ID, forT.ID, d.Reason)
			}
			cur[tk.Team] -= len(tk.GPUUUIDs())
			if cur[tk.Team] < guar[tk.Team] {
				t.Fatalf("reclaim of %s takes team %s from %d to %d, under its guarantee %d",
					tk.ID, tk.Team, usage[tk.Team], cur[tk.Team], guar[tk.Team])
			}
			if !reclaimers[forT.ID] {
				reclaimers[forT.ID] = true
				if promisedTo[forT.Team] >= guar[forT.Team] {
					t.Fatalf("team %s reclaims for %s with %d GPUs held or promised, guarantee %d",
						forT.Team, forT.ID, promisedTo[forT.Team], guar[forT.Team])
				}
				promisedTo[forT.Team] += forT.GPUs
			}
		default:
			t.Fatalf("unknown decision kind %q", d.Kind)
		}
	}

	// Explain: every queued task not dispatched has a wait, with a known
	// reason and its own position.
	if !o.Explain {
		if r.Waiting != nil {
			t.Fatalf("Waiting without Explain")
		}
		return
	}
	pos := map[int]string{}
	for _, q := range st.Queued() {
		w, ok := r.Waiting[q.ID]
		if seen["dispatch:"+q.ID] {
			if ok {
				t.Fatalf("%s dispatched and waiting", q.ID)
			}
			continue
		}
		if !ok {
			t.Fatalf("%s neither dispatched nor waiting", q.ID)
		}
		if !knownReason[w.Reason] {
			t.Fatalf("%s: unknown reason %q", q.ID, w.Reason)
		}
		if other, dup := pos[w.Position]; dup {
			t.Fatalf("%s and %s both at position %d", q.ID, other, w.Position)
		}
		pos[w.Position] = q.ID
	}
}

var stateOpts = cmp.Options{cmpopts.IgnoreUnexported(domain.State{}, domain.Task{}, domain.Node{}), cmpopts.EquateEmpty()}

func queueIDs(st *domain.State) []string {
	var out []string
	for _, t := range st.Queued() {
		out = append(out, t.ID)
	}
	return out
}

// One pass over a random state: (a)–(g).
func TestPropPass(t *testing.T) {
	known := bugs{}
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		o := genOptions(t)
		t.Logf("world:\n%s", dump(c.st, o, c.now))
		before := c.st.Clone()
		beforeQ := queueIDs(c.st)
		p := policy.New(o)
		r := p.Plan(c.input())

		checkPass(t, c.st, o, r, known)

		// (f) The pass leaves its input alone.
		if diff := cmp.Diff(before, c.st, stateOpts); diff != "" {
			t.Fatalf("Plan modified the state (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(beforeQ, queueIDs(c.st)); diff != "" {
			t.Fatalf("Plan modified the queue order (-before +after):\n%s", diff)
		}
		// (g) Determinism: the same input, again and on a clone.
		if diff := cmp.Diff(r, p.Plan(c.input()), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("second Plan differs (-first +second):\n%s", diff)
		}
		in := c.input()
		in.State = before
		if diff := cmp.Diff(r, p.Plan(in), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Plan on a clone differs (-original +clone):\n%s", diff)
		}
		// Explain only explains: the decisions are the same without it.
		if diff := cmp.Diff(r.Decisions, p.With(!o.Explain).Plan(c.input()).Decisions, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Explain=%v changes the decisions (-with +without):\n%s", o.Explain, diff)
		}
		// Applied, the decisions are facts the fold accepts.
		c.play(r)
	})
	known.report(t)
}

// Passes played forward over random states: each pass's decisions are
// applied, yielding tasks exit, some running tasks end; every pass is
// checked as above.
func TestPropPlayed(t *testing.T) {
	known := bugs{}
	rapid.Check(t, func(t *rapid.T) {
		c := genWorld(t)
		o := genOptions(t)
		p := policy.New(o)
		for step := 0; step < 8; step++ {
			r := p.Plan(c.input())
			checkPass(t, c.st, o, r, known)
			c.play(r)
			c.advance(time.Duration(rapid.IntRange(1, 120).Draw(t, "dt")) * time.Minute)
			for _, tk := range c.st.Active() {
				switch {
				case tk.State == domain.Preempting && rapid.Bool().Draw(t, "exits"):
					c.exit(tk.ID)
				case tk.State == domain.Running && rapid.IntRange(0, 3).Draw(t, "ends") == 0:
					c.complete(tk.ID)
				}
			}
		}
	})
	known.report(t)
}

// dump renders a state and options compactly, for a failing case's log.
func dump(st *domain.State, o policy.Options, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "options %+v\n", o)
	for _, name := range st.NodeNames() {
		n := st.Nodes[name]
		var bad []int
		for _, g := range n.GPUs {
			if !g.Healthy {
				bad = append(bad, g.Index)
			}
		}
		model, mem := "", 0
		if len(n.GPUs) > 0 {
			model, mem = n.GPUs[0].Model, n.GPUs[0].MemoryMiB
		}
		fmt.Fprintf(&b, "node %s %s: %d × %s %d MiB, unhealthy %v\n", name, n.State, len(n.GPUs), model, mem, bad)
	}
	ids := make([]string, 0, len(st.Tasks))
	for id := range st.Tasks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return st.Tasks[ids[i]].SubmitSeq < st.Tasks[ids[j]].SubmitSeq })
	for _, id := range ids {
		tk := st.Tasks[id]
		fmt.Fprintf(&b, "task %s %s %s team %s gpus %d preemptible %v", id, tk.State, tk.Priority, tk.Team, tk.GPUs, tk.Preemptible)
		if tk.GPUModel != "" || tk.MinGPUMemMiB > 0 {
			fmt.Fprintf(&b, " model %q mem %d", tk.GPUModel, tk.MinGPUMemMiB)
		}
		if tk.HoldsGPUs() {
			fmt.Fprintf(&b, " on %s started %s", placements(tk.Placements), tk.StartedAt.Sub(now))
		}
		if tk.PreemptFor != "" {
			fmt.Fprintf(&b, " yielding for %s", tk.PreemptFor)
		}
		b.WriteString("\n")
	}
	return b.String()
}
