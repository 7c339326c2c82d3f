package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/events"
	"github.com/gpuq/gpuq/pkg/policy"
)

// PlacementOptions size a Placement run.
type PlacementOptions struct {
	Nodes   int // of PerNode GPUs each
	PerNode int
	Queued  int
	Events  int // completions, each followed by a pass
	// NoEnvQueued: the heap per queued task is also measured on this many
	// submissions without an environment (0: not measured).
	NoEnvQueued int
	// Ready, when set, is called once the busy cluster is built, before
	// the events (a benchmark resets its timer there).
	Ready func()
}

// PlacementResult is one Placement run.
type PlacementResult struct {
	Nodes       int           `json:"nodes"`
	GPUs        int           `json:"gpus"`
	Queued      int           `json:"queued"`
	Events      int           `json:"events"`
	Placements  int           `json:"placements"`
	Preemptions int           `json:"preempt_decisions"` // decided, not applied
	Took        time.Duration `json:"took_ns"`           // passes and their dispatches folded
	PlanTime    time.Duration `json:"plan_ns"`           // of Took: in policy.Plan
	CPU         time.Duration `json:"cpu_ns"`            // the process's CPU time over the events (the pass and GC)
	P50         time.Duration `json:"p50_ns"`            // per event
	P99         time.Duration `json:"p99_ns"`
	Max         time.Duration `json:"max_ns"`
	// The same per event in the thread's CPU time (Linux): the pass's own
	// work and GC assists, not the time other processes hold the core.
	P50CPU time.Duration `json:"p50_cpu_ns,omitempty"`
	P99CPU time.Duration `json:"p99_cpu_ns,omitempty"`
	// BytesPerQueuedTask is the live heap the fold of one queued task's
	// submission adds (runtime.MemStats.HeapAlloc after GC, before and
	// after folding all of them, divided by their number).
	BytesPerQueuedTask float64 `json:"bytes_per_queued_task"`
	// EnvBytes is the exported environment of each submission (keys and
	// values), part of the above; BytesPerQueuedTaskNoEnv is the same
	// measure for submissions without one (on NoEnvQueued tasks).
	EnvBytes                int     `json:"env_bytes"`
	BytesPerQueuedTaskNoEnv float64 `json:"bytes_per_queued_task_no_env"`
	// Burst: one pass on the same queue with every GPU free.
	BurstPlacements int           `json:"burst_placements"`
	BurstTook       time.Duration `json:"burst_ns"`
	BurstCPU        time.Duration `json:"burst_cpu_ns"`
}

// BurstPerS is placements per second of the burst pass.
func (r PlacementResult) BurstPerS() float64 {
	return perSecond(int64(r.BurstPlacements), r.BurstTook)
}

// PerS is placements per second of Took.
func (r PlacementResult) PerS() float64 {
	return perSecond(int64(r.Placements), r.Took)
}

// Placement measures the pure policy (pkg/policy, default options) on a
// big, busy cluster, the workload of pkg/policy's BenchmarkPlan: o.Nodes
// nodes of o.PerNode GPUs and o.Queued queued tasks of 1–8 GPUs in mixed
// classes and teams. The state is built as the services build theirs, by
// folding events; each queued task's submitted event is encoded and
// decoded first, so the fold keeps exactly what it keeps from the log.
//
//  1. The nodes join, all GPUs free.
//  2. The queue is folded; the heap it adds is measured.
//  3. Burst: one pass on the free cluster (timed, not applied).
//  4. Every GPU gets a running, non-preemptible task of 1–8 GPUs.
//  5. o.Events times: one running task completes (folded), a pass runs
//     (policy.Plan), and its dispatches are folded as dispatched and
//     started. A pass plus folding its dispatches is one event's latency;
//     placements per second count over their sum. Preemption decisions
//     are counted, not applied.
func Placement(ctx context.Context, o PlacementOptions) (PlacementResult, error) {
	res := PlacementResult{Nodes: o.Nodes, GPUs: o.Nodes * o.PerNode, Queued: o.Queued, Events: o.Events}
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFolder()
	for k, v := range ciEnv {
		res.EnvBytes += len(k) + len(v)
	}

	// 1. Nodes.
	for i := 0; i < o.Nodes; i++ {
		f.apply(available(nodeName(i), o.PerNode))
	}

	// 2. The queue, its heap measured; and, apart, the same without env.
	var err error
	if res.BytesPerQueuedTask, err = f.queue(ctx, rng, o.Queued, true); err != nil {
		return res, err
	}
	if n := o.NoEnvQueued; n > 0 {
		if res.BytesPerQueuedTaskNoEnv, err = newFolder().queue(ctx, rand.New(rand.NewPCG(3, 4)), n, false); err != nil {
			return res, err
		}
	}

	// 3. Burst: one pass places what fits on the free cluster.
	p := policy.New(policy.DefaultOptions())
	start, cpu := time.Now(), cpuTime()
	burst := p.Plan(policy.Input{State: f.st, Now: f.now})
	res.BurstTook, res.BurstCPU = time.Since(start), cpuTime()-cpu
	for _, d := range burst.Decisions {
		if d.Kind == policy.Dispatch {
			res.BurstPlacements++
		}
	}

	// 4. Every GPU busy.
	var running []string
	for i := 0; i < o.Nodes; i++ {
		name := nodeName(i)
		for g := 0; g < o.PerNode; {
			k := min(1+rng.IntN(8), o.PerNode-g)
			r := request(o.Queued + len(running)) // ids and keys apart from the queued tasks'
			r.Priority, r.GPUs, r.Hours, r.NoPreempt = classes[rng.IntN(len(classes))].String(), k, float64(1+rng.IntN(48)), true
			if err := r.Validate(domain.DefaultLimits); err != nil {
				return res, err
			}
			id := fmt.Sprintf("run-%d-%d", i, g)
			f.apply(submittedOf(r, id, f.now))
			pl := events.Placement{Node: name}
			for x := g; x < g+k; x++ {
				pl.GPUs = append(pl.GPUs, gpuUUID(name, x))
			}
			f.apply(events.Dispatched{TaskID: id, Placements: []events.Placement{pl}, BasedOnSeq: f.seq})
			f.apply(events.Started{TaskID: id, Node: name, PID: 1})
			running = append(running, id)
			g += k
		}
	}
	if f.st.Ignored > 0 {
		return res, fmt.Errorf("bench: the fold refused %d setup events", f.st.Ignored)
	}

	// 5. Events: a completion, a pass, its dispatches.
	if o.Ready != nil {
		o.Ready()
	}
	lat := make([]time.Duration, 0, o.Events)
	tlat := make([]time.Duration, 0, o.Events)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu = cpuTime()
	for i := 0; i < o.Events; i++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		f.now = f.now.Add(time.Minute)
		if len(running) > 0 {
			j := rng.IntN(len(running))
			f.apply(events.Completed{TaskID: running[j], Node: f.st.Tasks[running[j]].Node})
			running[j] = running[len(running)-1]
			running = running[:len(running)-1]
		}
		start, tcpu := time.Now(), threadCPUTime()
		r := p.Plan(policy.Input{State: f.st, Now: f.now})
		res.PlanTime += time.Since(start)
		for _, d := range r.Decisions {
			if d.Kind != policy.Dispatch {
				res.Preemptions++
				continue
			}
			f.apply(events.Dispatched{TaskID: d.TaskID, Placements: d.Placements, BasedOnSeq: f.seq, Reason: d.Reason, Backfill: d.Backfill})
			f.apply(events.Started{TaskID: d.TaskID, Node: d.Placements[0].Node, PID: 1})
			running = append(running, d.TaskID)
			res.Placements++
		}
		d := time.Since(start)
		res.Took += d
		lat = append(lat, d)
		tlat = append(tlat, threadCPUTime()-tcpu)
	}
	res.CPU = cpuTime() - cpu
	if f.st.Ignored > 0 {
		return res, fmt.Errorf("bench: the fold refused %d events (the policy placed on held GPUs?)", f.st.Ignored)
	}
	slices.Sort(lat)
	slices.Sort(tlat)
	res.P50, res.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	res.P50CPU, res.P99CPU = quantile(tlat, 0.50), quantile(tlat, 0.99)
	if len(lat) > 0 {
		res.Max = lat[len(lat)-1]
	}
	return res, nil
}

// classes is the class mix of pkg/policy's BenchmarkPlan.
var classes = []domain.Priority{domain.Low, domain.Low, domain.Medium, domain.Medium, domain.High, domain.Critical}

// queue folds n queued submissions (1–8 GPUs, mixed classes and teams,
// with or without the CI environment) and returns the live heap they add
// per task: runtime.MemStats.HeapAlloc after a GC, before and after. The
// submissions are encoded and decoded in parallel, a chunk at a time, and
// folded in order.
func (f *folder) queue(ctx context.Context, rng *rand.Rand, n int, env bool) (float64, error) {
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const chunk = 4096
	workers := max(1, runtime.GOMAXPROCS(0))
	subs := make([]events.Submitted, 0, chunk)
	recs := make([]events.Record, chunk)
	errs := make([]error, workers)
	for lo := 0; lo < n; lo += chunk {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		// 1. The chunk's submissions, in order (the random draws are).
		subs = subs[:0]
		for i := lo; i < min(lo+chunk, n); i++ {
			f.now = f.now.Add(time.Second)
			r := request(i)
			if !env {
				r.Env = nil
			}
			r.Priority, r.GPUs = classes[rng.IntN(len(classes))].String(), 1+rng.IntN(8)
			r.Team, r.Hours, r.NoPreempt = fmt.Sprintf("team%d", rng.IntN(8)), float64(1+rng.IntN(96))/4, rng.IntN(2) == 0
			if err := r.Validate(domain.DefaultLimits); err != nil {
				return 0, err
			}
			subs = append(subs, submittedOf(r, taskID(i), f.now))
		}
		// 2. Encoded and decoded, as read from the log.
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for j := w; j < len(subs); j += workers {
					e := subs[j]
					subj, data, _, err := events.Encode(e, events.Meta{Time: e.SubmittedAt})
					if err == nil {
						recs[j], err = events.Decode(events.Stored{Seq: f.seq + uint64(j) + 1, Subject: subj, Data: data, Time: e.SubmittedAt})
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, err
			}
		}
		// 3. Folded in order.
		for j := range subs {
			f.seq++
			f.st.Apply(recs[j])
			recs[j] = events.Record{}
		}
	}
	subs, recs = nil, nil
	after := heap()
	runtime.KeepAlive(f)
	if n == 0 {
		return 0, nil
	}
	return float64(int64(after)-int64(before)) / float64(n), nil
}

// quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// folder folds events in memory with increasing sequences at its clock.
type folder struct {
	st  *domain.State
	seq uint64
	now time.Time
}

func newFolder() *folder {
	return &folder{st: domain.NewState(), now: time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)}
}

func (f *folder) apply(e events.Event) {
	f.seq++
	f.st.Apply(events.Record{Seq: f.seq, Subject: events.Subject(e),
		Envelope: events.Envelope{Type: e.EventType(), Version: events.SchemaVersion, Time: f.now}, Event: e})
}
