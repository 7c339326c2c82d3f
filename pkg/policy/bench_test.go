package policy_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// BenchmarkPlan is the scheduler's steady state on a big cluster: 1,000
// nodes of 8 GPUs, all busy, and 100,000 queued tasks of 1–8 GPUs in mixed
// classes. Each iteration one running task completes, a pass runs, and its
// dispatches are applied. It reports placements per second of Plan time,
// the p99 of one Plan call, and the heap the fold spends per queued task.
//
// Every task is submitted non-preemptible: this measures placement. With
// preemptible tasks running, a pass searches victims for every blocked
// task that may preempt (see BenchmarkPreemptAttempt): with half the tasks
// preemptible the first pass makes hundreds of preemptions, 25 ms with the
// pass's victim pool (370 ms before it; 2m46s when each search cloned the
// free map once per node). -policy.bench-full adds that case; run it with
// -benchtime 1x.
//
// With Explain the pass also explains every queued task, as the advisor
// asks it to. Explaining costs a placement search over every node for each
// blocked task, and a scan of the blocked tasks for higher-class blockers
// that is quadratic in the top class (plan.go explain): on this cluster a
// pass takes ~0.2 s at 10,000 queued and over 0.6 s at 100,000, so 2000
// iterations would take many minutes. The Explain case therefore runs on
// 2,000 queued tasks; -policy.bench-full adds 10,000 and 100,000.
func BenchmarkPlan(b *testing.B) {
	cases := []benchCase{
		{queued: benchQueued},
		{queued: 2_000, explain: true},
	}
	if *benchFull {
		cases = append(cases,
			benchCase{queued: 10_000, explain: true},
			benchCase{queued: benchQueued, explain: true},
			benchCase{queued: benchQueued, preemptible: true})
	}
	for _, bc := range cases {
		b.Run(bc.name(), func(b *testing.B) { benchPlan(b, bc) })
	}
}

// benchFull adds the cases too slow for 2000 iterations; run them with a
// small -benchtime (e.g. 3x).
var benchFull = flag.Bool("policy.bench-full", false, "add the slow full-size benchmark cases (Explain on 100,000 queued, preemptible tasks, preemption search on 1,000 nodes)")

const (
	benchNodes  = 1000
	benchPerGPU = 8
	benchQueued = 100_000
)

type benchCase struct {
	queued      int
	explain     bool
	preemptible bool // half the tasks, running and queued
}

func (bc benchCase) name() string {
	s := fmt.Sprintf("explain=%v/queued=%d", bc.explain, bc.queued)
	if bc.preemptible {
		s += "/preemptible"
	}
	return s
}

// busyCluster adds nodes whose every GPU a running task of 1–8 GPUs
// holds; it returns the running tasks' ids.
func busyCluster(c *harness, rng *rand.Rand, nodes int, preemptible bool) []string {
	var running []string
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("n%04d", i)
		c.node(name, benchPerGPU, "H100", 81920)
		for g := 0; g < benchPerGPU; {
			k := min(1+rng.IntN(benchPerGPU), benchPerGPU-g)
			id := fmt.Sprintf("run-%d-%d", i, g)
			c.running(task{id: id, class: benchClasses[rng.IntN(len(benchClasses))], noPreempt: !preemptible || rng.IntN(2) == 0,
				hours: float64(1 + rng.IntN(48))}, on(name, span(g, g+k)...))
			running = append(running, id)
			g += k
		}
	}
	return running
}

var benchClasses = []domain.Priority{domain.Low, domain.Low, domain.Medium, domain.Medium, domain.High, domain.Critical}

func benchPlan(b *testing.B, bc benchCase) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := cluster(b)

	// 1. Nodes, every GPU held by a running task.
	running := busyCluster(c, rng, benchNodes, bc.preemptible)

	// 2. The queue, its heap measured.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < bc.queued; i++ {
		c.submit(task{id: fmt.Sprintf("q%06d", i), class: benchClasses[rng.IntN(len(benchClasses))], gpus: 1 + rng.IntN(benchPerGPU),
			team: fmt.Sprintf("team%d", rng.IntN(8)), hours: float64(1+rng.IntN(96)) / 4,
			noPreempt: !bc.preemptible || rng.IntN(2) == 0, at: t0.Add(time.Duration(i) * time.Second)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perTask := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(bc.queued)

	// 3. Iterations: a task completes, a pass, its dispatches applied.
	p := policy.New(policy.Options{Explain: bc.explain})
	durations := make([]time.Duration, 0, b.N)
	placed := 0
	var planTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.advance(time.Minute)
		if len(running) > 0 {
			j := rng.IntN(len(running))
			c.complete(running[j])
			running[j] = running[len(running)-1]
			running = running[:len(running)-1]
		}
		// No task has a prediction of its own: the policy predicts by the
		// user's estimates (Predict nil), as pkg/bench's Placement.
		in := c.input()
		in.Predict = nil
		start := time.Now()
		r := p.Plan(in)
		d := time.Since(start)
		durations = append(durations, d)
		planTime += d
		for _, dec := range r.Decisions {
			if dec.Kind != policy.Dispatch {
				continue
			}
			c.emit(events.Dispatched{TaskID: dec.TaskID, Placements: dec.Placements, BasedOnSeq: c.seq})
			c.emit(events.Started{TaskID: dec.TaskID, Node: dec.Placements[0].Node, PID: 1})
			running = append(running, dec.TaskID)
			placed++
		}
	}
	b.StopTimer()
	reportPlan(b, durations, planTime, placed)
	b.ReportMetric(perTask, "B/queued-task")
}

func reportPlan(b *testing.B, durations []time.Duration, planTime time.Duration, placed int) {
	slices.Sort(durations)
	p99 := durations[min(len(durations)-1, len(durations)*99/100)]
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns/op")
	if planTime > 0 {
		b.ReportMetric(float64(placed)/planTime.Seconds(), "placements/s")
	}
}

// BenchmarkPreemptAttempt is the cost of one preemption search that
// fails, on a busy cluster plus 8 small nodes, each with one preemptible
// 1-GPU LOW task beside a fixed one: a queued CRITICAL task needs 8 GPUs,
// which the 8 victims would free, but on no node together, so every pass
// searches and fails (a pass of 100 nodes by default, 1,000 with
// -policy.bench-full). The search reads the pass's victim pool, so it
// costs the victims and the nodes they hold GPUs on, not every holder.
func BenchmarkPreemptAttempt(b *testing.B) {
	sizes := []int{100}
	if *benchFull {
		sizes = append(sizes, benchNodes)
	}
	for _, nodes := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			c := cluster(b)
			busyCluster(c, rng, nodes, false)
			for i := 0; i < 8; i++ {
				name := fmt.Sprintf("small%d", i)
				c.node(name, 2, "H100", 81920).
					running(task{id: name + "-fixed", class: domain.Low, noPreempt: true}, on(name, 0)).
					running(task{id: name + "-victim", class: domain.Low}, on(name, 1))
			}
			c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			p := policy.New(policy.Options{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := p.Plan(c.input()); len(r.Decisions) != 0 {
					b.Fatalf("decisions %v, want none", summary(r.Decisions))
				}
			}
		})
	}
}

// BenchmarkPreemptPass is one pass that preempts on a busy cluster of
// preemptible tasks (half of them): a CRITICAL task of 8 GPUs queued, so
// the pass builds its victim pool (every running preemptible task, its
// nodes, sorted) and searches every node for the fewest victims. The
// decisions are not applied: every iteration is the same pass, as the
// advisor's forward simulation runs one per simulated event.
// -policy.bench-full adds 10,000 nodes.
func BenchmarkPreemptPass(b *testing.B) {
	sizes := []int{benchNodes}
	if *benchFull {
		sizes = append(sizes, 10*benchNodes) // the advisor's benchmark's cluster
	}
	for _, nodes := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			c := cluster(b)
			busyCluster(c, rng, nodes, true)
			c.submit(task{id: "crit", class: domain.Critical, gpus: 8})
			p := policy.New(policy.Options{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := p.Plan(c.input()); len(r.Decisions) == 0 {
					b.Fatal("no decision, want a preemption")
				}
			}
		})
	}
}
